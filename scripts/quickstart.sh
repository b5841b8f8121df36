#!/usr/bin/env bash
# From a fresh clone to a quantized model in one command, with nothing next to the checkout:
# build dependencies (Debian/Ubuntu packages; no Python needed), a Release build, a description
# of the demo model that ships in examples/stories260K, then the main job -- GPTQ 4-bit on the
# built-in calibration corpus (no --calib) -- with a perplexity check original vs quantized on
# the shipped TinyStories text. Output in out/ (git-ignored); running it again replaces it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=examples/stories260K
TEXT=examples/data/tinystories_sample.txt

LQ_SETUP_PIP=${LQ_SETUP_PIP:-0} bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "${JOBS:-2}"

build/llmquant inspect "$MODEL"
mkdir -p out
# GPTQ 4-bit, groups of 32 (the model's hidden size is 64), act-order; calibration windows from
# the built-in corpus; the check fails (exit 91) if perplexity rises more than 10%.
build/llmquant gptq "$MODEL" -o out/stories260K-gptq-w4g32 --group-size 32 --desc-act --force \
    --check-ppl "$TEXT" --max-ppl-increase 10
echo "quickstart: out/stories260K-gptq-w4g32 is a GPTQ v1 checkpoint (loads in transformers / vLLM)"
