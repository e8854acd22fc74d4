#!/usr/bin/env bash
# The Python environment of python/weft-worker's tests and of the Rust worker tests
# (crates/weft-sources/tests/worker.rs, crates/weft-node/tests/declared_worker.rs): a venv at
# ${WEFT_PY_VENV:-$HOME/.cache/weft-py} with the pinned test requirements
# (python/weft-worker/requirements-test.txt) and python/weft-worker installed editable.
# Idempotent: the venv is rebuilt only when the requirements or pyproject.toml change.
# Prints the venv's python on stdout (everything else goes to stderr), so:
#   export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG=$ROOT/python/weft-worker
VENV=${WEFT_PY_VENV:-$HOME/.cache/weft-py}
PY=${PYTHON:-python3}

log() { echo "python-env.sh: $*" >&2; }

stamp=$(cat "$PKG/requirements-test.txt" "$PKG/pyproject.toml" | sha256sum | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.weft-stamp" 2>/dev/null)" != "$stamp" ]; then
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { log "python/weft-worker needs Python >= 3.11 ($PY is $("$PY" --version 2>&1))"; exit 1; }
  log "creating $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$PKG/requirements-test.txt" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$PKG" >&2
  echo "$stamp" >"$VENV/.weft-stamp"
fi
# The editable install points at this checkout: check it imports from here.
got=$("$VENV/bin/python" -c 'import weft_worker, os; print(os.path.dirname(os.path.dirname(os.path.abspath(weft_worker.__file__))))')
if [ "$got" != "$PKG" ]; then
  log "weft_worker in $VENV comes from $got, reinstalling from $PKG"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$PKG" >&2
fi
echo "$VENV/bin/python"
