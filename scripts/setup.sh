#!/usr/bin/env bash
# Install what building and testing llmquant needs. Idempotent: installs only what is missing.
#   Debian/Ubuntu packages (apt-get, non-interactive; sudo only when not root).
#   Python packages for the optional oracle tests, if pip exists (failures tolerated: those
#   tests print SKIP): numpy, safetensors, sentencepiece, protobuf, tokenizers, transformers,
#   torch, accelerate, gguf, bitsandbytes, compressed-tensors, autoawq and auto-gptq (no deps),
#   gptqmodel.
#   LQ_SETUP_PIP=0 skips them (the product needs none).
set -euo pipefail

DEB_PKGS=(build-essential cmake pkg-config libopenblas-dev libopenblas-openmp-dev liblapacke-dev libzstd-dev zstd
          libcjson-dev libpcre2-dev libutf8proc-dev)

if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    missing=()
    for p in "${DEB_PKGS[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$p")
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        SUDO=()
        if [ "$(id -u)" -ne 0 ]; then
            if command -v sudo >/dev/null 2>&1; then
                SUDO=(sudo)
            else
                echo "setup: need root or sudo to install: ${missing[*]}" >&2
                exit 1
            fi
        fi
        echo "setup: installing ${missing[*]}"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"
    else
        echo "setup: Debian packages present (${DEB_PKGS[*]})"
    fi
else
    echo "setup: not a Debian/Ubuntu system; install the equivalents of: ${DEB_PKGS[*]}" >&2
fi

if [ "${LQ_SETUP_PIP:-1}" != 0 ] && command -v python3 >/dev/null 2>&1 &&
    python3 -m pip --version >/dev/null 2>&1; then
    # module name : pip name
    want=()
    for pair in numpy:numpy safetensors:safetensors sentencepiece:sentencepiece \
        google.protobuf:protobuf tokenizers:tokenizers transformers:transformers torch:torch \
        accelerate:accelerate gguf:gguf bitsandbytes:bitsandbytes \
        compressed_tensors:compressed-tensors==0.20.1; do
        mod=${pair%%:*}
        python3 -c "import $mod" >/dev/null 2>&1 || want+=("${pair##*:}")
    done
    if [ ${#want[@]} -gt 0 ]; then
        echo "setup: pip installing ${want[*]} (optional, for the Python oracle tests)"
        for w in "${want[@]}"; do
            # torch from PyPI's default index (its CPU-only index is not reachable everywhere)
            python3 -m pip install --quiet "$w" ||
                echo "setup: pip install $w failed; the tests that need it will SKIP" >&2
        done
    else
        echo "setup: Python oracle packages present"
    fi
    # The reference quantization libraries, without their dependencies: tests/py/
    # test_format_compat.py loads only their torch layers (QuantLinear / WQLinear_GEMM), and their
    # full dependency sets pin old transformers/datasets. Versions pinned to what the test reads.
    for pair in awq:autoawq==0.2.9 auto_gptq:auto-gptq==0.7.1; do
        mod=${pair%%:*}
        python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$mod') is None)" ||
            BUILD_CUDA_EXT=0 python3 -m pip install --quiet --no-deps "${pair##*:}" ||
            echo "setup: pip install ${pair##*:} failed; test_format_compat will SKIP it" >&2
    done
    # GPTQModel, which loads the mixed-precision GPTQ checkpoints ("dynamic" rules) in
    # tests/py/test_gptqmodel_load.py on its CPU torch kernel; with its dependencies (about a
    # minute on a fresh machine), no CUDA extension built.
    python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('gptqmodel') is None)" ||
        BUILD_CUDA_EXT=0 python3 -m pip install --quiet gptqmodel==7.7.0 ||
        echo "setup: pip install gptqmodel==7.7.0 failed; test_gptqmodel_load will SKIP" >&2
fi
