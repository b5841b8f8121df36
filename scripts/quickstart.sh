#!/usr/bin/env bash
# From a fresh checkout to a quantized stories260K in one command: dependencies, build,
# `inspect`, then 4-bit GPTQ with a perplexity check. Output in out/ (git-ignored).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SHARED=${LQ_SHARED:-}
if [ -z "$SHARED" ]; then # ../shared, or a shared/ further up (git worktrees)
    SHARED=../shared
    d=$ROOT
    while [ "$d" != / ]; do
        d=$(dirname "$d")
        if [ -d "$d/shared/models" ]; then
            SHARED=$(realpath --relative-to="$ROOT" "$d/shared")
            break
        fi
    done
fi
MODEL=$SHARED/models/stories260K
if [ ! -f "$MODEL/config.json" ]; then
    echo "quickstart: $MODEL not found (set LQ_SHARED to the shared data directory)" >&2
    exit 5
fi

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "${JOBS:-2}"

build/llmquant inspect "$MODEL"
mkdir -p out
# GPTQ 4-bit, groups of 32 (hidden size is 64), act-order, calibrated on WikiText-2 validation
# text; then original vs quantized perplexity on in-domain text (fails over +10%).
build/llmquant gptq "$MODEL" -o out/stories260K-gptq-w4g32 --group-size 32 --desc-act --force \
    --tokenizer "$MODEL/llama2c/tok512.bin" \
    --calib "$SHARED/data/wikitext2/wiki.valid.tokens" --nsamples 32 --seqlen 512 \
    --check-ppl "$SHARED/data/tinystories/tinystories_sample.txt" --max-ppl-increase 10
echo "quickstart: wrote out/stories260K-gptq-w4g32 (GPTQ v1: loads in transformers / vLLM)"
