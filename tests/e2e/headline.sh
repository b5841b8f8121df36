#!/usr/bin/env bash
# The product as a user types it, on the demo model that ships with the repository (no shared
# data needed): calibration from the built-in corpus (no --calib, no --tokenizer), also from a
# binary copied alone into an empty directory; honest exits before any work (a bit width the
# format cannot store, a run that would quantize nothing) with their own codes, a hint, and
# nothing written; a partial run that names what stays unquantized and why.
set -e
. "$(dirname "$0")/cli_lib.bash"
B="$LQ_BIN"
M="${LQ_SRC:-}/examples/stories260K"
[ -f "$M/model.safetensors" ] || { echo "SKIP: $M not found (LQ_SRC)"; exit 77; }
rm -rf "$T"
mkdir -p "$T/w"
W="$T/w"
SMALL=(--nsamples 8 --seqlen 128)

# 1. gptq with no calibration option: the built-in corpus, named in the report
run "$B" --json gptq "$M" -o "$W/gptq" --group-size 32 "${SMALL[@]}"
expect_rc 0 "gptq without --calib"
expect_in "$T/out" '"calib":"builtin:llmquant-calib-v2"' "report names the built-in corpus"
CHECKS=$((CHECKS + 1))
[ -f "$W/gptq/tokenizer.model" ] && [ -f "$W/gptq/model.safetensors" ] ||
    fail "gptq output lacks tokenizer.model or model.safetensors"

# 2. the binary alone, in a directory of its own, still has the corpus
mkdir -p "$W/alone"
cp "$B" "$W/alone/llmquant"
run env -i PATH=/usr/bin:/bin HOME="$W" "$W/alone/llmquant" awq "$M" -o "$W/awq-alone" \
    --group-size 32 "${SMALL[@]}" --device cpu
expect_rc 0 "awq from a copied binary, no --calib"
expect_in "$T/out" "builtin:llmquant-calib-v2" "copied binary reports the built-in corpus"
run "$B" int8 "$M" -o "$W/int8" "${SMALL[@]}" --calib builtin
expect_rc 0 "int8 --calib builtin"

# 3. honest exits: their own codes, one line naming the reason, nothing written
run "$B" rtn "$M" -o "$W/r5" --bits 5
expect_error 93 "stores 2, 3, 4 or 8-bit codes only" "rtn --bits 5"
run "$B" awq "$M" -o "$W/a8" --bits 8 --group-size 32
expect_error 93 "4-bit codes only" "awq --bits 8"
run "$B" awq "$M" -o "$W/a128"
expect_error 94 "would quantize none of the model's linears" "awq at group 128 on hidden 64"
expect_in "$T/err" "--group-size 64 would quantize 4 of the 7" "a group size that works"
run "$B" gptq "$M" -o "$W/g8" --bits 3 --group-size 32 --calib /nonexistent/x.txt
expect_rc 5 "missing calibration file"
CHECKS=$((CHECKS + 1))
for d in r5 a8 a128 g8; do
    [ ! -e "$W/$d" ] || fail "$d was created by a failing run"
done
CHECKS=$((CHECKS + 1))
if ls -a "$W" | grep -q lqtmp; then fail "temporary directory left behind: $(ls -a "$W")"; fi

# 4. a partial run says up front what stays unquantized and why, and the report lists it
run "$B" --json rtn "$M" -o "$W/rtn" --group-size 32
expect_rc 0 "rtn partial"
expect_in "$T/err" "mlp.gate_proj [172 x 64] stays unquantized in every layer" "partial warning"
expect_in "$T/out" '"unquantized_modules":["mlp.gate_proj","mlp.up_proj","mlp.down_proj"]' \
    "report lists the unquantized linears"
expect_in "$T/out" '"unquantized_reasons":{"mlp.gate_proj":"4-bit GPTQ packs 8 values' \
    "report says why"
CHECKS=$((CHECKS + 1))
[ "$(grep -c 'stays unquantized' "$T/err")" = 3 ] || fail "one warning per linear: $(cat "$T/err")"
finish
