#!/usr/bin/env bash
# --max-memory on a synthetic Llama: generates the model (bench_gen_llama, random fp16, tok512
# tokenizer), quantizes it with gptq with and without the budget and prints the peak RSS of each
# (the CLI's --json peak_rss_bytes and, when installed, /usr/bin/time -v).
# Usage: bench/max_memory.sh BUILD_DIR [BUDGET] [HIDDEN LAYERS INTERMEDIATE HEADS NSAMPLES SEQLEN]
# Defaults: full size 4096 wide, 8 layers, 11008 intermediate, 32 heads, 128 x 2048 tokens.
set -eu
BUILD=${1:?usage: $0 BUILD_DIR [BUDGET] [HIDDEN LAYERS INTER HEADS NSAMPLES SEQLEN]}
BUDGET=${2:-12G}
H=${3:-4096} L=${4:-8} I=${5:-11008} NH=${6:-32} NS=${7:-128} SL=${8:-2048}
SH=${LQ_SHARED:-$(dirname "$0")/../../shared}
[ -d "$SH/models" ] || SH=$(dirname "$0")/../../../shared
TMP=${TMPDIR:-/tmp}/lq_maxmem.$$
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
"$BUILD/bench/bench_gen_llama" "$TMP/model" --hidden "$H" --layers "$L" --intermediate "$I" \
    --heads "$NH" --kv-heads "$NH" --vocab 512
cp "$SH/models/stories260K/llama2c/tok512.bin" "$TMP/model/"
peak() { grep -o '"peak_rss_bytes":[0-9]*' "$1" | cut -d: -f2; }
run() { # NAME [options]
    local name=$1
    shift
    local t=()
    [ -x /usr/bin/time ] && t=(/usr/bin/time -v -o "$TMP/$name.time")
    "${t[@]}" "$BUILD/llmquant" gptq "$TMP/model" -o "$TMP/out_$name" --calib \
        "$SH/data/wikitext2/wiki.valid.tokens" --nsamples "$NS" --seqlen "$SL" --json -q "$@" \
        >"$TMP/$name.json"
    rm -rf "$TMP/out_$name"
    local p
    p=$(peak "$TMP/$name.json")
    local tv=""
    [ -f "$TMP/$name.time" ] && tv=$(awk '/Maximum resident/ {printf "%.0f", $6 / 1024}' "$TMP/$name.time")
    local s
    s=$(grep -o '"seconds":[0-9.]*' "$TMP/$name.json" | tail -1 | cut -d: -f2)
    printf '| %s | %.0f | %s | %.1f |\n' "$name" "$(echo "$p / 1048576" | bc -l)" "${tv:-n/a}" "$s"
    eval "PEAK_$name=$p"
}
echo "synthetic llama ${H}x${L} layers (intermediate $I), gptq w4 g128, $NS x $SL calibration tokens"
echo
echo "| run | peak RSS (MiB, --json) | peak RSS (MiB, time -v) | seconds |"
echo "|---|---:|---:|---:|"
run nobudget
run budget --max-memory "$BUDGET"
B=$(numfmt --from=iec "$BUDGET")
echo
awk -v p="$PEAK_budget" -v b="$B" -v n="$PEAK_nobudget" 'BEGIN {
    printf "budget %.0f MiB: peak %.0f MiB (%.1f%% of budget) %s; without budget %.0f MiB %s\n",
        b / 1048576, p / 1048576, 100 * p / b, p <= 1.1 * b ? "PASS" : "FAIL",
        n / 1048576, n > p ? "(higher: PASS)" : "(not higher: FAIL)";
    exit !(p <= 1.1 * b && n > p) }'
