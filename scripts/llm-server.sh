#!/usr/bin/env bash
# Starts / stops a real small LLM (SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible
# llama-server) for weft-llm's real-server test tier.
#   bash scripts/llm-server.sh start   # builds once (cached), starts on a free port, prints the base URL
#   bash scripts/llm-server.sh stop    # stops the server started by `start` (by its PID)
#   bash scripts/llm-server.sh url     # prints the base URL of the running server
# `start` prints `http://127.0.0.1:PORT/v1` on stdout (everything else goes to stderr), so:
#   export WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LLM_HOME=${LLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/weft-llm}
STATE=${WEFT_LLM_STATE:-${TMPDIR:-/tmp}/weft-llm-server}
mkdir -p "$STATE"

setup() {
  # Prefer the shared copy when it sits beside the repository, else the vendored one.
  local script="$HERE/setup-local-llm.sh"
  [ -f "$HERE/../../shared/llm/setup-local-llm.sh" ] && script="$HERE/../../shared/llm/setup-local-llm.sh"
  # A portable build (GGML_NATIVE=OFF): the -march=native build of this llama.cpp crashed
  # with a general protection fault while loading the model on an AVX-512 machine here.
  LLM_HOME="$LLM_HOME" JOBS=${JOBS:-1} GGML_NATIVE=${GGML_NATIVE:-OFF} bash "$script" >&2
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
  if [ -f "$STATE/pid" ] && kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
    cat "$STATE/url"; return 0
  fi
  setup
  local port; port=$(free_port)
  "$LLM_HOME/bin/llama-server" -m "$LLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
    --chat-template-file "$LLM_HOME/models/chatml-tools.jinja" \
    --host 127.0.0.1 --port "$port" -c 4096 -np 1 -t 1 >"$STATE/server.log" 2>&1 &
  echo $! >"$STATE/pid"
  for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      echo "http://127.0.0.1:$port/v1" | tee "$STATE/url"
      return 0
    fi
    if ! kill -0 "$(cat "$STATE/pid")" 2>/dev/null; then
      echo "llama-server exited; log:" >&2; cat "$STATE/server.log" >&2; return 1
    fi
    sleep 0.2
  done
  echo "llama-server did not become healthy in 20 s; log: $STATE/server.log" >&2
  stop; return 1
}

stop() {
  if [ -f "$STATE/pid" ]; then
    kill "$(cat "$STATE/pid")" 2>/dev/null || true
    rm -f "$STATE/pid" "$STATE/url"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  url) cat "$STATE/url" ;;
  setup) setup ;;
  *) echo "usage: $0 start|stop|url|setup" >&2; exit 2 ;;
esac
