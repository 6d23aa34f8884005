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

# The hash of pyproject.toml the venv was last installed from (.venv/.parley-installed).
_pyproject_hash() {
  python -c 'import hashlib; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())'
}
installed_for_this_pyproject() {
  [ -x .venv/bin/parley ] && [ "$(cat .venv/.parley-installed 2>/dev/null)" = "$(_pyproject_hash)" ]
}
mark_installed() {
  _pyproject_hash > .venv/.parley-installed
}
