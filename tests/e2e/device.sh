#!/usr/bin/env bash
# --device on a machine without a usable GPU (what CI has): auto falls back to the CPU with one
# notice (CUDA builds) or silently (CPU builds); --device cuda is LQ_ERR_NO_DEVICE (100), one line.
# With a GPU present the checks that need its absence are skipped (test_gpu_pipeline covers it).
source "$(dirname "$0")/cli_lib.bash"
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
M=$S/models/stories260K
TOK=$M/llama2c/tok512.bin
TS=$S/data/tinystories/tinystories_sample.txt
run "$LQ_BIN" --version
expect_rc 0 "--version"
ndev=$(sed -n 's/.*CUDA devices: \([0-9]*\).*/\1/p' "$T/out")
cuda=$(sed -n 's/.*CUDA: \([a-z]*\),.*/\1/p' "$T/out")
CHECKS=$((CHECKS + 1))
[ -n "$ndev" ] && [ -n "$cuda" ] || fail "--version does not state CUDA support and devices: $(cat "$T/out")"
if [ "${ndev:-0}" != 0 ]; then
    echo "SKIP: $ndev CUDA device(s) present"
    exit 77
fi
rm -rf "$T/dev"
mkdir -p "$T/dev"
for cmd in "rtn $M -o $T/dev/rtn --group-size 32" "ppl $M --data $TS --tokenizer $TOK" \
    "gptq $M -o $T/dev/gptq --group-size 32 --tokenizer $TOK --calib $TS --nsamples 4 --seqlen 64"; do
    # shellcheck disable=SC2086
    run "$LQ_BIN" $cmd --device cuda
    expect_error 100 "--device cuda: " "${cmd%% *} --device cuda without a device"
    CHECKS=$((CHECKS + 1))
    [ -z "$(ls -A "$T/dev")" ] || fail "${cmd%% *} --device cuda left $(ls -A "$T/dev")"
done
# auto (the default): works; a CUDA build says once that it computes on the CPU
run "$LQ_BIN" gptq "$M" -o "$T/dev/gptq" --group-size 32 --tokenizer "$TOK" --calib "$TS" \
    --nsamples 4 --seqlen 64
expect_rc 0 "gptq --device auto without a device"
CHECKS=$((CHECKS + 1))
n=$(grep -c "no usable CUDA device" "$T/err" || true)
if [ "$cuda" = yes ]; then
    [ "$n" = 1 ] || fail "CUDA build: expected one 'no usable CUDA device' notice, got $n: $(cat "$T/err")"
else
    [ "$n" = 0 ] || fail "CPU build printed a CUDA notice: $(cat "$T/err")"
fi
expect_in "$T/out" " on cpu, peak RSS" "report names the device"
run "$LQ_BIN" -q gptq "$M" -o "$T/dev/gptq2" --group-size 32 --tokenizer "$TOK" --calib "$TS" \
    --nsamples 4 --seqlen 64
expect_rc 0 "gptq -q"
CHECKS=$((CHECKS + 1))
[ ! -s "$T/err" ] || fail "--quiet still printed: $(cat "$T/err")"
finish
