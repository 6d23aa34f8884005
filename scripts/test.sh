#!/usr/bin/env bash
# Install Parley with its dev tools and run every check: lint, format, types, tests.
source "$(dirname "$0")/_venv.sh"
python -m pip install -q --disable-pip-version-check -e '.[dev]'
mark_installed
ruff check .
ruff format --check .
mypy
pytest -q --durations=15 "$@"
