#!/usr/bin/env bash
# Configure, build (Release, warnings as errors) and run every CPU test: the README's test
# command. Environment: BUILD_DIR (default build), JOBS (default 2), LQ_SHARED (shared test
# data; default: the first shared/ with models/ found next to the checkout or above it),
# LQ_CUDA (ON/OFF, default: auto-detect nvcc), CMAKE_ARGS (extra configure arguments).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-2}

if [ -z "${LQ_SHARED:-}" ]; then
    d=$ROOT
    while [ "$d" != / ]; do
        d=$(dirname "$d")
        if [ -d "$d/shared/models" ]; then
            LQ_SHARED=$d/shared
            break
        fi
    done
fi
args=(-DCMAKE_BUILD_TYPE=Release -DLQ_WERROR=ON)
[ -n "${LQ_SHARED:-}" ] && args+=("-DLQ_SHARED_DIR=$LQ_SHARED")
[ -n "${LQ_CUDA:-}" ] && args+=("-DLQ_CUDA=$LQ_CUDA")
# shellcheck disable=SC2206
[ -n "${CMAKE_ARGS:-}" ] && args+=($CMAKE_ARGS)

cmake -S "$ROOT" -B "$BUILD" "${args[@]}"
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" -LE gpu --output-on-failure -j "$JOBS"
