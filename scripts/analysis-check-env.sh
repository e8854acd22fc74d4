#!/usr/bin/env bash
# The Python environment of the analysis cross-check (python/analysis-check): a venv at
# ${WEFT_ANALYSIS_VENV:-$HOME/.cache/weft-analysis-check} with pm4py and its dependencies
# pinned (python/analysis-check/requirements.txt), about 550 MB. `.ci/run` uses it for a live
# differential run (fresh nets each run); it also regenerates the committed fixtures that
# crates/weft-analysis/tests/differential.rs checks on every `cargo test`.
# Idempotent: the venv is rebuilt only when the requirements change.
# Prints the venv's python on stdout (everything else goes to stderr), so:
#   PY=$(bash scripts/analysis-check-env.sh)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ=$ROOT/python/analysis-check/requirements.txt
VENV=${WEFT_ANALYSIS_VENV:-$HOME/.cache/weft-analysis-check}
PY=${PYTHON:-python3}

log() { echo "analysis-check-env.sh: $*" >&2; }

stamp=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.weft-stamp" 2>/dev/null)" != "$stamp" ]; then
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { log "pm4py needs Python >= 3.10 ($PY is $("$PY" --version 2>&1))"; exit 1; }
  log "creating $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
  echo "$stamp" >"$VENV/.weft-stamp"
fi
"$VENV/bin/python" -c 'import pm4py' >/dev/null 2>&1 \
  || { log "$VENV has no working pm4py; remove it and run again"; exit 1; }
echo "$VENV/bin/python"
