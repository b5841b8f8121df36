#!/usr/bin/env bash
# --max-memory is honoured: a calibrated conversion of a small synthetic Llama (hidden 512,
# 2 layers, 4096 calibration tokens) under a budget of its RSS floor + 120 MiB peaks within 10% of it (the
# activations spill to zstd temp files and the forward chunks shrink), below the unbudgeted
# run, with a byte-identical output. --device cpu: probing a GPU starts the CUDA runtime, whose
# ~190 MB would dominate this small budget in CUDA builds. bench/max_memory.sh measures the
# 4096-wide case.
source "$(dirname "$0")/cli_lib.bash"
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
WIKI=$S/data/wikitext2/wiki.valid.tokens
[ -f "$WIKI" ] || WIKI=builtin # the built-in corpus holds WikiText-2 validation
if grep -q __asan_init "$LQ_BIN" 2>/dev/null; then
    echo "SKIP: resident memory under AddressSanitizer is the sanitizer's (shadow, quarantine)"
    exit 77
fi
GEN=${LQ_BUILD:-}/bench/bench_synth_model
[ -x "$GEN" ] || { echo "SKIP: $GEN not built"; exit 77; }
W=$T/maxmem
rm -rf "$W"
mkdir -p "$W/model"
"$GEN" "$W/model" --hidden 512 --intermediate 1408 --layers 2 --heads 8 --kv-heads 8 \
    --tokenizer "$S/models/stories260K/llama2c/tok512.bin" >/dev/null 2>&1 || fail "generator"
peak() { grep -o '"peak_rss_bytes":[0-9.e+]*' "$T/out" | cut -d: -f2; }
# The process's own floor (a CUDA build maps ~260 MB of CUDA libraries at start) sits under
# every budget: measure it with a conversion that holds almost nothing.
run "$LQ_BIN" rtn "$S/models/stories260K" -o "$W/floor" -q --json --device cpu
expect_rc 0 "rtn for the RSS floor"
floor=$(peak)
budget_mib=$(awk -v f="$floor" 'BEGIN { printf "%d", f / 1048576 + 120 }')
run "$LQ_BIN" int8 "$W/model" -o "$W/free" -q --json --calib "$WIKI" \
    --nsamples 32 --seqlen 128 --device cpu
expect_rc 0 "int8 without a budget"
free_peak=$(peak)
run "$LQ_BIN" int8 "$W/model" -o "$W/budget" -q --json --calib "$WIKI" \
    --nsamples 32 --seqlen 128 --max-memory "${budget_mib}M" --device cpu
expect_rc 0 "int8 --max-memory ${budget_mib}M"
budget_peak=$(peak)
echo "peak RSS: floor $floor, $free_peak without a budget, $budget_peak with --max-memory ${budget_mib}M"
CHECKS=$((CHECKS + 1))
awk -v p="$budget_peak" -v f="$free_peak" -v b="$budget_mib" \
    'BEGIN { exit !(p > 0 && p <= 1.10 * b * 1048576 && p < f) }' ||
    fail "peak $budget_peak over 110% of $budget_mib MiB or not below the unbudgeted $free_peak"
CHECKS=$((CHECKS + 1))
cmp -s "$W/free/model.safetensors" "$W/budget/model.safetensors" ||
    fail "spilling changed the output"
# GPTQ keeps stage states between its passes (one more activation copy in the plan): under the
# same budget they spill like the rest and come back bit-exact, so the output is the one of the
# passes that re-run the layer from its input. (Not the unbudgeted output: the budget shrinks
# the chunks, and the Hessians' running averages round with the chunking.)
for sc in stage-cache no-stage-cache; do
    run "$LQ_BIN" gptq "$W/model" -o "$W/gptq-$sc" -q --json --calib "$WIKI" \
        --nsamples 32 --seqlen 128 --device cpu --max-memory "${budget_mib}M" --$sc
    expect_rc 0 "gptq --$sc --max-memory ${budget_mib}M"
    echo "gptq --$sc peak RSS under --max-memory ${budget_mib}M: $(peak)"
done
CHECKS=$((CHECKS + 1))
cmp -s "$W/gptq-stage-cache/model.safetensors" "$W/gptq-no-stage-cache/model.safetensors" ||
    fail "GPTQ's spilled stage states changed the output"
run "$LQ_BIN" int8 "$W/model" -o "$W/tiny" -q --calib "$WIKI" \
    --nsamples 32 --seqlen 128 --max-memory 20M
expect_error 3 "--max-memory 20 MiB is below" "a budget below one layer's needs -> LQ_ERR_NOMEM"
CHECKS=$((CHECKS + 1))
[ ! -e "$W/tiny" ] || fail "a refused budget left an output"
rm -rf "$W"
finish
