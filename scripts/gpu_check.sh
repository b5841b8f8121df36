#!/usr/bin/env bash
# GPU check from a fresh clone: configure with CUDA for this machine's GPU, build only the
# library + GPU tests + GPU benchmarks, run `ctest -L gpu`, run the kernel benchmark.
#
#   scripts/gpu_check.sh OUTDIR [--quick]
#
# Writes into OUTDIR: summary.txt, nvidia-smi.txt, configure.log, build.log, ctest_gpu.log,
# bench_kernels_gpu.md (+ .json). Exit status: 0 all passed, 1 a GPU test failed, 2 no nvcc /
# no GPU, 3 build dependencies missing (see summary.txt), 4 configure/build failed.
# Environment: LQ_BUILD_DIR (default <repo>/build-gpu), LQ_CUDA_ARCH (default: the GPU's
# compute capability from nvidia-smi, else 90), LQ_JOBS (default nproc).
set -uo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [--quick]" >&2
    exit 2
fi
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
QUICK=()
[ "${2:-}" = "--quick" ] && QUICK=(--quick)
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LQ_BUILD_DIR:-$SRC/build-gpu}
JOBS=${LQ_JOBS:-$(nproc 2>/dev/null || echo 4)}
: > "$OUT/summary.txt"
say() { echo "gpu_check: $*" | tee -a "$OUT/summary.txt"; }

# --- toolchain and device --------------------------------------------------------------
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
    say "FAIL: nvcc not found (install the CUDA toolkit or put nvcc on PATH)"
    exit 2
fi
say "nvcc: $NVCC ($("$NVCC" --version | tail -1))"
if nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
    say "gpu: $(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader | head -1)"
else
    say "WARNING: nvidia-smi failed (no driver?); the GPU tests will SKIP"
fi
ARCH=${LQ_CUDA_ARCH:-}
if [ -z "$ARCH" ]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    ARCH=${cc:-90} # no nvidia-smi: build for H100/H200 ("native" needs a visible GPU)
fi
say "CMAKE_CUDA_ARCHITECTURES=$ARCH"

# --- build dependencies (CMakeLists.txt: pkg-config zstd cjson pcre2-8 utf8proc, OpenBLAS,
#     LAPACKE, OpenMP) ----------------------------------------------------------------------
missing_deps() {
    local m=()
    command -v cmake >/dev/null 2>&1 || m+=(cmake)
    command -v pkg-config >/dev/null 2>&1 || { m+=(pkg-config); echo "${m[*]}"; return; }
    for p in libzstd libcjson libpcre2-8 libutf8proc; do
        pkg-config --exists "$p" || m+=("$p")
    done
    pkg-config --exists openblas || ls /usr/lib/*/openblas*/libopenblas.so >/dev/null 2>&1 ||
        m+=(openblas)
    local h found=0
    for h in /usr/include/lapacke.h /usr/include/*/lapacke.h /usr/local/include/lapacke.h; do
        [ -e "$h" ] && found=1
    done
    [ $found = 1 ] || m+=(lapacke)
    echo "${m[*]}"
}
miss=$(missing_deps)
if [ -n "$miss" ]; then
    say "missing build dependencies: $miss; trying scripts/setup.sh (needs apt + network)"
    if command -v apt-get >/dev/null 2>&1 &&
        LQ_SETUP_PIP=0 bash "$SRC/scripts/setup.sh" >> "$OUT/setup.log" 2>&1; then
        say "setup.sh done"
    else
        say "setup.sh failed or apt-get unavailable (log: setup.log)"
    fi
    miss=$(missing_deps)
    if [ -n "$miss" ]; then
        say "FAIL: still missing: $miss. Install the Debian packages build-essential cmake" \
            "pkg-config libopenblas-dev libopenblas-openmp-dev liblapacke-dev libzstd-dev" \
            "libcjson-dev libpcre2-dev libutf8proc-dev (or their equivalents) and rerun."
        exit 3
    fi
fi

# --- configure + build ----------------------------------------------------------------------
if ! cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLQ_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" > "$OUT/configure.log" 2>&1; then
    say "FAIL: configure (log: configure.log)"
    tail -20 "$OUT/configure.log"
    exit 4
fi
if ! grep -q "CUDA kernels ON" "$OUT/configure.log"; then
    say "FAIL: CMake did not enable CUDA (log: configure.log)"
    exit 4
fi
targets=(llmquant)
for f in "$SRC"/tests/test_*gpu*.c; do [ -e "$f" ] && targets+=("$(basename "${f%.c}")"); done
for f in "$SRC"/bench/bench_*gpu*.c "$SRC"/bench/bench_*gpu*.cu; do
    [ -e "$f" ] && targets+=("$(basename "${f%.*}")")
done
say "building: ${targets[*]}"
if ! cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" > "$OUT/build.log" 2>&1; then
    say "FAIL: build (log: build.log)"
    grep -E "error" "$OUT/build.log" | head -20
    exit 4
fi

# --- tests + benchmark ------------------------------------------------------------------------
rc=0
(cd "$BUILD" && ctest -L gpu --output-on-failure) > "$OUT/ctest_gpu.log" 2>&1 || rc=1
say "ctest -L gpu: $(grep -E 'tests passed|tests failed' "$OUT/ctest_gpu.log" | tail -1)"
grep -q "Skipped" "$OUT/ctest_gpu.log" && say "WARNING: some GPU tests were SKIPPED (see ctest_gpu.log)"
if [ -x "$BUILD/bench/bench_kernels_gpu" ]; then
    "$BUILD/bench/bench_kernels_gpu" "${QUICK[@]}" --json "$OUT/bench_kernels_gpu.json" \
        > "$OUT/bench_kernels_gpu.md" 2>&1 || { say "bench_kernels_gpu failed"; rc=1; }
    cat "$OUT/bench_kernels_gpu.md"
fi
if [ $rc -eq 0 ]; then say "OK"; else say "FAILED (see $OUT)"; fi
exit $rc
