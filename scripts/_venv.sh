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
# A .venv is reused only when it is whole (activate and pip: Debian/Ubuntu's Python
# without python3-venv leaves a half-made one), made here (a moved checkout's scripts
# point at the old place) and on Python 3.11+; otherwise it is made again.
_venv_ok() {
  [ -x .venv/bin/python ] && [ -f .venv/bin/activate ] && [ -e .venv/bin/pip ] \
    && grep -qF "\"$(pwd -P)/.venv\"" .venv/bin/activate \
    && .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
if [ -e .venv ] && ! _venv_ok; then
  echo "parley: .venv is half-made, moved or on an older Python; making it again" >&2
  rm -rf .venv
fi
if [ ! -e .venv ]; then
  echo "parley: creating .venv with $PY" >&2
  if ! "$PY" -m venv .venv; then
    rm -rf .venv
    ver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    echo "parley: $PY cannot make a virtual environment; on Debian/Ubuntu: sudo apt-get install python$ver-venv" >&2
    exit 2
  fi
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
