#!/usr/bin/env bash
# Build llama.cpp's comparison tools from the llama-cpp-python sdist on PyPI (its source is
# vendor/llama.cpp), only the targets asked for, into a cache directory; print the bin dir.
#   bench/build_llamacpp.sh [TARGET...]     default: llama-tokenize llama-perplexity
#   (test-backend-ops, for `test-backend-ops perf -o MUL_MAT`, turns on LLAMA_BUILD_TESTS)
# Cache: $LQ_LLAMACPP_DIR, else ${XDG_CACHE_HOME:-~/.cache}/llmquant/llama.cpp. Version:
# $LQ_LLAMACPP_PY (default llama-cpp-python==0.3.36, vendoring llama.cpp 0c1e570).
set -euo pipefail
DIR=${LQ_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/llama.cpp}
SPEC=${LQ_LLAMACPP_PY:-llama-cpp-python==0.3.36}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-tokenize llama-perplexity)
mkdir -p "$DIR"
src=$(ls -d "$DIR"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1 || true)
if [ -z "$src" ]; then
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$DIR" "$SPEC" >&2
    tar -xzf "$DIR"/llama_cpp_python-*.tar.gz -C "$DIR"
    src=$(ls -d "$DIR"/llama_cpp_python-*/vendor/llama.cpp | head -1)
fi
# GGML_NATIVE builds for this CPU: a build made on another (the cache outlives machines) may
# stop on an illegal instruction, so a build is kept only for the CPU (and flags) that made it.
# No AMX: ggml's tile kernels fault (SIGSEGV at ldtilecfg) on VMs that list amx_tile but do not
# grant the tile state, which is where these comparisons run.
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
grep -q amx_tile /proc/cpuinfo 2>/dev/null || noamx=""
cpu=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null; echo "$noamx") | md5sum | cut -c1-16)
if [ -d "$src/build" ] && [ "$(cat "$src/build/.lq_cpu" 2>/dev/null)" != "$cpu" ]; then
    echo "build_llamacpp: $src/build was made on another CPU: rebuilding" >&2
    rm -rf "$src/build"
fi
tests=OFF # its test programs (test-backend-ops: the kernel comparison) only when asked for
for t in "${targets[@]}"; do [[ $t == test-* ]] && tests=ON; done
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=$tests -DGGML_OPENMP=ON \
    "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx" >&2
cmake --build "$src/build" -j "${JOBS:-2}" --target "${targets[@]}" >&2
echo "$cpu" >"$src/build/.lq_cpu"
echo "$src/build/bin"
