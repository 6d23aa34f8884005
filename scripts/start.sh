#!/usr/bin/env bash
# Set up (first run) and start Parley: embedded Valkey, local web chat, every platform with a token.
source "$(dirname "$0")/_venv.sh"
python -m pip install -q --disable-pip-version-check -e .
exec parley run "$@"
