# Sourced by start.sh and test.sh: find Python >= 3.11 and make/refresh .venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=""
for cand in python3.13 python3.12 python3.11 python3 python; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    PY="$cand"; break
  fi
done
if [ -z "$PY" ]; then
  echo "parley: Python 3.11 or newer is required (found none on PATH)" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate

# What the venv was last installed from (.venv/.parley-installed): pyproject.toml and
# the Python it runs (a venv rebuilt for a new Python keeps the stamp, not the packages).
_install_stamp() {
  python -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read() + sys.version.encode() + sys.executable.encode()).hexdigest())'
}
installed_for_this_pyproject() {
  [ -x .venv/bin/parley ] && [ "$(cat .venv/.parley-installed 2>/dev/null)" = "$(_install_stamp)" ] \
    && (cd / && python -c 'import bots.cli' 2>/dev/null)  # as installed: not moved, nothing removed
}
mark_installed() {
  _install_stamp > .venv/.parley-installed
}
