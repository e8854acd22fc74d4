#!/usr/bin/env bash
# The Python environment of the MCP test server (python/mcp-test-server/server.py), the real
# MCP peer of crates/weft-sources/tests/mcp.rs and crates/weft-node/tests/declared_mcp.rs: a
# venv at ${WEFT_MCP_VENV:-$HOME/.cache/weft-mcp} with the pinned official MCP Python SDK
# (python/mcp-test-server/requirements.txt).
# Idempotent: the venv is rebuilt only when the requirements change.
# Prints the venv's python on stdout (everything else goes to stderr), so:
#   export WEFT_TEST_MCP_PYTHON=$(bash scripts/mcp-test-env.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ=$ROOT/python/mcp-test-server/requirements.txt
VENV=${WEFT_MCP_VENV:-$HOME/.cache/weft-mcp}
PY=${PYTHON:-python3}

log() { echo "mcp-test-env.sh: $*" >&2; }

stamp=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.weft-stamp" 2>/dev/null)" != "$stamp" ]; then
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { log "the MCP Python SDK needs Python >= 3.10 ($PY is $("$PY" --version 2>&1))"; exit 1; }
  log "creating $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
  echo "$stamp" >"$VENV/.weft-stamp"
fi
"$VENV/bin/python" -c 'import mcp.server' \
  || { log "$VENV has no working mcp package; remove it and run again"; exit 1; }
echo "$VENV/bin/python"
