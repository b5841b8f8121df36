#!/usr/bin/env bash
# --max-memory on a synthetic 4096-wide Llama: peak RSS of a calibrated conversion with and
# without a budget that forces the activations to spill (zstd temp files).
# Usage: bench/max_memory.sh [BUILD] [WORK] [METHOD] [BUDGET]
#   defaults: build, /tmp/lq_maxmem, int8, 700M; model: hidden 4096, intermediate 4096, 8 layers,
#   32 heads (LQ_MM_LAYERS / LQ_MM_INTER / LQ_MM_NSAMPLES / LQ_MM_SEQLEN override).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
work=${2:-/tmp/lq_maxmem}
method=${3:-int8}
budget=${4:-700M}
shared=${LQ_SHARED:-$here/../shared}
[ -d "$shared/models" ] || shared=$here/../../shared
bin=$build/llmquant
model=$work/synth-4096x${LQ_MM_LAYERS:-8}
mkdir -p "$work"
if [ ! -f "$model/config.json" ]; then
    mkdir -p "$model"
    "$build/bench/bench_synth_model" "$model" --hidden 4096 --intermediate "${LQ_MM_INTER:-4096}" \
        --layers "${LQ_MM_LAYERS:-8}" --heads 32 --kv-heads 32 \
        --tokenizer "$shared/models/stories260K/llama2c/tok512.bin"
fi
"$bin" inspect "$model" | sed -n '3,4p'
run() { # label extra-args...
    local label=$1
    shift
    local rep
    rep=$("$bin" "$method" "$model" -o "$work/out-$label" --force -q --json \
        --calib "$shared/data/wikitext2/wiki.valid.tokens" --nsamples "${LQ_MM_NSAMPLES:-16}" \
        --seqlen "${LQ_MM_SEQLEN:-512}" "$@")
    local peak secs
    peak=$(printf '%s' "$rep" | grep -o '"peak_rss_bytes":[0-9.e+]*' | cut -d: -f2)
    secs=$(printf '%s' "$rep" | grep -o '"seconds":[0-9.e+]*' | head -1 | cut -d: -f2)
    awk -v l="$label" -v p="$peak" -v s="$secs" 'BEGIN { printf "%-22s peak RSS %7.1f MiB  %6.1f s\n", l, p / 1048576, s }'
    echo "$peak"
}
echo "method $method, $(( ${LQ_MM_NSAMPLES:-16} * ${LQ_MM_SEQLEN:-512} )) calibration tokens"
free_run=$(run no-budget | tee /dev/stderr | tail -1)
budget_run=$(run "budget-$budget" --max-memory "$budget" | tee /dev/stderr | tail -1)
bytes=$(numfmt --from=iec "${budget%B}")
awk -v b="$bytes" -v p="$budget_run" -v f="$free_run" 'BEGIN {
    printf "budget %.1f MiB: peak %.1f MiB = %.1f%% of the budget (without: %.1f MiB)\n",
           b / 1048576, p / 1048576, 100 * p / b, f / 1048576
    exit !(p <= 1.10 * b && p < f) }' && echo "PASS: within 10% of the budget" || echo "FAIL"
rm -rf "$work"/out-*
