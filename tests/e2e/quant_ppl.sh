#!/usr/bin/env bash
# End to end on stories260K: quantize with the CLI, evaluate with `llmquant ppl` (TinyStories,
# GPTQ protocol): FP16 6.4371; RTN w4 g32 within +15%; GPTQ w4 g32 (small calibration) below
# RTN, and within 2% of that on integer activations (--int-activations); INT8 within 1% of FP16; --check-ppl over its bound exits 91 and marks the output; the
# model directory is byte-identical afterwards. (bench/evidence_stories260k.sh: the full table.)
source "$(dirname "$0")/cli_lib.bash"
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
M=$S/models/stories260K
TOK=$M/llama2c/tok512.bin
TS=$S/data/tinystories/tinystories_sample.txt
CAL=$S/data/wikitext2/wiki.valid.tokens
# WikiText-2 validation when the shared data has it, else the built-in corpus (which holds it)
[ -f "$CAL" ] || CAL=builtin
W=$T/qppl
rm -rf "$W"
mkdir -p "$W"
before=$(cd "$M" && find . -type f -exec sha256sum {} + | sort | sha256sum)
ppl() { # DIR -> ppl on TinyStories
    "$LQ_BIN" ppl "$1" --data "$TS" --tokenizer "$TOK" -q --json | grep -o '"ppl":[0-9.]*' | cut -d: -f2
}
within() { # VALUE LO HI DESCRIPTION
    CHECKS=$((CHECKS + 1))
    awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }' ||
        fail "$4: $1 not in [$2, $3]"
}
fp=$(ppl "$M")
within "$fp" 6.4370 6.4372 "FP16 perplexity (GPTQ protocol, ctx 512)"
run "$LQ_BIN" rtn "$M" -o "$W/rtn" --group-size 32 -q
expect_rc 0 "rtn w4 g32"
rtn=$(ppl "$W/rtn")
within "$rtn" "$fp" "$(awk -v f="$fp" 'BEGIN { print f * 1.15 }')" "RTN w4 g32 perplexity"
run "$LQ_BIN" gptq "$M" -o "$W/gptq" --group-size 32 --tokenizer "$TOK" --calib "$CAL" \
    --nsamples 16 --seqlen 256 -q
expect_rc 0 "gptq w4 g32"
gptq=$(ppl "$W/gptq")
within "$gptq" "$fp" "$rtn" "GPTQ w4 g32 perplexity below RTN's"
# --int-activations: the integer-activation kernels where the CPU has AVX-512 VNNI (rows in
# chunks of 1024), the float ones elsewhere; close to the float result either way
gx=$("$LQ_BIN" ppl "$W/gptq" --data "$TS" --tokenizer "$TOK" -q --json --int-activations)
gxv=$(grep -o '"ppl":[0-9.]*' <<<"$gx" | cut -d: -f2)
within "$gxv" "$(awk -v f="$gptq" 'BEGIN { print f * 0.98 }')" \
    "$(awk -v f="$gptq" 'BEGIN { print f * 1.02 }')" "GPTQ perplexity on integer activations"
CHECKS=$((CHECKS + 1))
grep -q '"int_activations":true' <<<"$gx" || fail "ppl --json does not say int_activations"
if grep -qw avx512_vnni /proc/cpuinfo && [ -z "${LQ_CPU_KERNELS:-}" ]; then
    CHECKS=$((CHECKS + 1))
    [ "$gxv" != "$gptq" ] || fail "--int-activations gave the float perplexity on a VNNI CPU"
fi
run "$LQ_BIN" int8 "$M" -o "$W/int8" --tokenizer "$TOK" --calib "$CAL" --nsamples 16 --seqlen 256 -q
expect_rc 0 "int8"
i8=$(ppl "$W/int8")
within "$i8" "$(awk -v f="$fp" 'BEGIN { print f * 0.99 }')" "$(awk -v f="$fp" 'BEGIN { print f * 1.01 }')" "INT8 within 1% of FP16"
echo "ppl: fp16 $fp, rtn w4 g32 $rtn, gptq w4 g32 $gptq (integer activations $gxv), int8 $i8"
run "$LQ_BIN" rtn "$M" -o "$W/bound" --group-size 32 --tokenizer "$TOK" --check-ppl "$TS" \
    --max-ppl-increase 1
expect_rc 91 "--check-ppl over its bound"
expect_in "$T/err" "exceeds --max-ppl-increase" "bound message"
CHECKS=$((CHECKS + 1))
[ -f "$W/bound/PPL_CHECK_FAILED" ] && [ -f "$W/bound/model.safetensors" ] ||
    fail "output over the bound is not written and marked"
CHECKS=$((CHECKS + 1))
[ "$before" = "$(cd "$M" && find . -type f -exec sha256sum {} + | sort | sha256sum)" ] ||
    fail "the model directory changed"
rm -rf "$W"
finish
