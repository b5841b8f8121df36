#!/usr/bin/env bash
# One real model end to end, from a GGUF file (scripts/fetch_models.sh caches SmolLM2-135M and
# Gemma-3-270M): GGUF -> fp16 HF directory -> every method -> perplexity (GPTQ protocol,
# ctx 2048, WikiText-2 test join), conversion wall time and peak RSS. One table on stdout,
# every JSON report under WORK/reports.
#
#   bench/evidence_gguf.sh GGUF BUILD_DIR WORK_DIR [CHUNKS] [NSAMPLES]
#
# CHUNKS (default 40): perplexity on the first CHUNKS windows of 2048 tokens (0 = all).
# NSAMPLES (default 128): calibration windows of 2048 tokens for gptq / awq / int8.
# The binary is copied to WORK_DIR first, so rebuilding while this runs does not disturb it.
# LQ_ONLY="fp16 gptq-w4-g128 ..." restricts the runs to those names (bench/evidence_lib.bash).
set -euo pipefail
GGUF=$(realpath "$1")
BUILD=$(cd "$2" && pwd)
WORK=$3
CHUNKS=${4:-40}
NS=${5:-128}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
TEST=$SHARED/data/wikitext2/wikitext2_test_hf_join.txt
[ -f "$GGUF" ] || { echo "no $GGUF: run scripts/fetch_models.sh" >&2; exit 77; }
[ -f "$TEST" ] || { echo "no $TEST (shared data)" >&2; exit 77; }
. "$ROOT/bench/evidence_lib.bash"
evidence_start "$GGUF" "$BUILD" "$WORK" model-f16

ppl fp16 model-f16
quant rtn-w4-g128 rtn --bits 4 --group-size 128
quant rtn-w3-g128 rtn --bits 3 --group-size 128
quant nf4 nf4
quant int8 int8 --nsamples "$NS"
quant gptq-w4-g128 gptq --bits 4 --group-size 128 --nsamples "$NS"
quant gptq-w3-g128 gptq --bits 3 --group-size 128 --nsamples "$NS"
quant awq-w4-g128 awq --group-size 128 --nsamples "$NS" --awq-tokens 1000000000

evidence_table
