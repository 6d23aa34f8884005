#!/usr/bin/env bash
# Install Parley with its dev tools and run every check: lint, format, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[dev]'
ruff check .
ruff format --check .
mypy
pytest -q "$@"
