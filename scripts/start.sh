#!/usr/bin/env bash
# Set up (first run) and start Parley: embedded Valkey, local web chat, every platform with a token.
source "$(dirname "$0")/_venv.sh"
# Install on the first run and when pyproject.toml changed since (the install is
# editable: code changes need none); later starts need no network.
if ! installed_for_this_pyproject; then
  echo "parley: installing into .venv (first run, or pyproject.toml changed; a few minutes)" >&2
  python -m pip install -q --disable-pip-version-check -e .
  mark_installed
fi
exec parley run "$@"
