#!/usr/bin/env bash
# CI's OpenAPI check (issue #28): fetches /openapi.json from a real `weft serve` and validates it
# as OpenAPI 3.1 with openapi-spec-validator (pinned, from PyPI: scripts/requirements-openapi.txt),
# which also rejects duplicate operationIds. Exits non-zero with the validator's report otherwise.
#
#   bash scripts/openapi-validate.sh        # builds `weft` (debug) unless WEFT_BIN is set
#
# The venv lives in ${XDG_CACHE_HOME:-$HOME/.cache}/weft-openapi and is rebuilt when the
# requirements change.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
REQ=scripts/requirements-openapi.txt
VENV=${XDG_CACHE_HOME:-$HOME/.cache}/weft-openapi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weft-target}

log() { echo "openapi-validate.sh: $*" >&2; }

stamp=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/openapi-spec-validator" ] || [ "$(cat "$VENV/.weft-stamp" 2>/dev/null)" != "$stamp" ]; then
  log "creating $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  echo "$stamp" >"$VENV/.weft-stamp"
fi

if [ -z "${WEFT_BIN:-}" ]; then
  cargo build --quiet -p weft-cli --bin weft
  WEFT_BIN=$CARGO_TARGET_DIR/debug/weft
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/weft-openapi.XXXXXX")
SERVER_PID=
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

(cd "$WORK" && exec env RUST_LOG=error "$WEFT_BIN" serve --listen 127.0.0.1:0 \
  --store "$WORK/weft.db" 2>"$WORK/server.log") &
SERVER_PID=$!
URL=
for _ in $(seq 1 100); do
  URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$WORK/server.log" 2>/dev/null | head -1 || true)
  [ -n "$URL" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; log "weft serve exited"; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$WORK/server.log" >&2; log "weft serve did not print its address"; exit 1; }

curl -fsS "$URL/openapi.json" -o "$WORK/openapi.json"
"$VENV/bin/python" - "$WORK/openapi.json" <<'PY'
import json, sys
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
doc = json.load(open(sys.argv[1]))
try:
    validate(doc)
except OpenAPIValidationError as e:
    sys.exit(f"openapi-validate.sh: /openapi.json is not valid OpenAPI {doc.get('openapi')}: {e}")
print(f"openapi-validate.sh: /openapi.json is valid OpenAPI {doc['openapi']} "
      f"({sum(len(v) for v in doc['paths'].values())} operations)", file=sys.stderr)
PY
