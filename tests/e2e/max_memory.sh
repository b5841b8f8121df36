#!/usr/bin/env bash
# --max-memory is honoured: gptq on a small synthetic Llama (bench_gen_llama: 128 wide, 1 layer)
# with enough calibration tokens (2048 x 64) that the activations outweigh the forward workspace;
# peak RSS with the budget stays within 10% of it, and without the budget it is higher.
# bench/max_memory.sh runs the same at full size (4096 wide, 8 layers).
set -e
. "$(dirname "$0")/cli_lib.bash"
GEN="${LQ_BUILD:-}/bench/bench_gen_llama"
S="${LQ_SHARED:-/nonexistent}"
[ -x "$GEN" ] || { echo "SKIP: $GEN not built (LQ_BUILD_BENCH=OFF)"; exit 77; }
[ -f "$S/models/stories260K/llama2c/tok512.bin" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
# Sanitizer shadow memory and quarantines make RSS meaningless.
if grep -q '^LQ_SANITIZE_ADDRESS:BOOL=ON' "$LQ_BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "SKIP: peak RSS is not meaningful under AddressSanitizer"
    exit 77
fi
rm -rf "$T"
mkdir -p "$T"
"$GEN" "$T/m" --hidden 128 --layers 1 --intermediate 352 --heads 4 --kv-heads 4 --vocab 512
cp "$S/models/stories260K/llama2c/tok512.bin" "$T/m/"
BUDGET_MIB=240
peak() { grep -o '"peak_rss_bytes":[0-9]*' "$T/out" | cut -d: -f2; }
args=(gptq "$T/m" --calib "$S/data/wikitext2/wiki.valid.tokens" --nsamples 2048 --seqlen 64
    --no-true-sequential --json -q)
run "$LQ_BIN" "${args[@]}" -o "$T/o1"
expect_rc 0 "gptq without budget"
P0=$(peak)
run "$LQ_BIN" "${args[@]}" -o "$T/o2" --max-memory ${BUDGET_MIB}M
expect_rc 0 "gptq --max-memory ${BUDGET_MIB}M"
P1=$(peak)
echo "peak RSS: no budget $((P0 >> 20)) MiB, --max-memory ${BUDGET_MIB}M $((P1 >> 20)) MiB"
CHECKS=$((CHECKS + 1))
[ -n "$P1" ] && [ "$P1" -le $((BUDGET_MIB * 1048576 * 11 / 10)) ] ||
    fail "peak RSS $P1 over 110% of --max-memory ${BUDGET_MIB}M"
CHECKS=$((CHECKS + 1))
[ -n "$P0" ] && [ "$P0" -gt "$P1" ] || fail "peak RSS without budget ($P0) not above the budgeted run ($P1)"
# a budget below one layer's needs is refused up front, naming the minimum
run "$LQ_BIN" "${args[@]:0:9}" -q -o "$T/o3" --max-memory 50M
expect_error 3 "--max-memory 50 MiB is below" "budget too small"
CHECKS=$((CHECKS + 1))
[ ! -e "$T/o3" ] || fail "budget too small: output left behind"
finish
