#!/usr/bin/env bash
# Build here what the device check runs on a lent GPU machine and pack it into
# gpu-bundle/bundle.tgz at the repository's root (ignored by git; the device tool carries it:
# carry ["gpu-bundle"]), a gzip'd tree of:
#   bin/    llmquant, the op / forward / kernel / pipeline tests, bench_synth_model,
#           bench_kernels_gpu (CUDA for ARCH, default 90: H100 and H200)
#   lib/    the non-CUDA shared libraries they load (OpenBLAS, LAPACKE, zstd, cJSON, PCRE2,
#           utf8proc, the OpenMP and Fortran runtimes): the device machine has CUDA's own
#           libraries and none of the Debian ones
#   shared/ stories260K and the TinyStories text in the layout the tests read ($LQ_SHARED)
# On the device: `scripts/device_check.sh BUDGET_S` (it finds gpu-bundle/ by itself).
#
#   scripts/gpu_bundle.sh [BUILD_DIR]     (default build-gpu; ARCH, JOBS from the environment)
# Prints the bundle's size; fails when it is over 60 MiB (the tool carries 64 MiB in all; the
# libraries and programs are about 85 MiB unpacked, 33 MiB packed).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$ROOT/build-gpu}
ARCH=${ARCH:-90}
JOBS=${JOBS:-2}
OUTB=$(mktemp -d "${TMPDIR:-/tmp}/lqbundle.XXXXXX")
trap 'rm -rf "$OUTB"' EXIT
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || {
    echo "gpu_bundle: nvcc not found" >&2
    exit 2
}
mkdir -p "$B"
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DLQ_CUDA=ON -DLQ_WERROR=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$B/configure.log" 2>&1 || {
    tail -20 "$B/configure.log" >&2
    exit 2
}
grep -q "llmquant: CUDA ON" "$B/configure.log" || {
    echo "gpu_bundle: CMake did not enable CUDA ($B/configure.log)" >&2
    exit 2
}
targets=(llmquant_cli test_ops test_forward_be test_kernels test_gpu_pipeline test_pipeline_be
    bench_synth_model bench_kernels_gpu)
cmake --build "$B" -j "$JOBS" --target "${targets[@]}"

mkdir -p "$OUTB/bin" "$OUTB/lib" "$OUTB/shared/models" "$OUTB/shared/data/tinystories"
for t in llmquant tests/test_ops tests/test_forward_be tests/test_kernels tests/test_gpu_pipeline \
    tests/test_pipeline_be bench/bench_synth_model bench/bench_kernels_gpu; do
    cp "$B/$t" "$OUTB/bin/"
    strip --strip-unneeded "$OUTB/bin/$(basename "$t")" 2>/dev/null || true
done
# every library they load but the C runtime's and CUDA's own
for f in "$OUTB"/bin/*; do
    ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | while read -r so; do
    case $(basename "$so") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | \
        libgcc_s.so* | libcuda.so* | libcudart* | libcublas* | libcusolver* | libcusparse* | \
        libnvJitLink* | libcurand* | libcufft*) ;;
    *) cp -L "$so" "$OUTB/lib/" ;;
    esac
done
cp -r "$ROOT/examples/stories260K" "$OUTB/shared/models/"
cp "$ROOT/examples/data/tinystories_sample.txt" "$OUTB/shared/data/tinystories/"
rm -rf "$ROOT/gpu-bundle"
mkdir -p "$ROOT/gpu-bundle"
tar -C "$OUTB" -czf "$ROOT/gpu-bundle/bundle.tgz" .
size=$(($(stat -c %s "$ROOT/gpu-bundle/bundle.tgz") >> 20))
echo "gpu_bundle: $ROOT/gpu-bundle/bundle.tgz, ${size} MiB packed ($(du -sm "$OUTB" | cut -f1)" \
    "MiB unpacked: $(ls "$OUTB/bin" | wc -l) programs, $(ls "$OUTB/lib" | wc -l) libraries)"
[ "$size" -le 60 ] || {
    echo "gpu_bundle: over 60 MiB" >&2
    exit 1
}
