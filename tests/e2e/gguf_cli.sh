#!/usr/bin/env bash
# GGUF input through the CLI on the real models scripts/fetch_models.sh caches: SmolLM2-135M
# (inspect, convert, quantize and ppl straight from the .gguf, the converted directory agreeing
# with the file), Gemma-3-270M (inspect, rtn), a truncated file (its
# own exit code, nothing written). Skips naming the fetch script when the models are absent.
set -e
. "$(dirname "$0")/cli_lib.bash"
B="$LQ_BIN"
MODELS="${LQ_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/models}"
G="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA="$MODELS/gemma-3-270m-q4_k_m.gguf"
TEXT="${LQ_SRC:-}/examples/data/tinystories_sample.txt"
if [ ! -f "$G" ] || [ ! -f "$GEMMA" ]; then
    echo "SKIP: $G or $GEMMA not cached: run scripts/fetch_models.sh"
    exit 77
fi
rm -rf "$T"
mkdir -p "$T/w"
W="$T/w"
SUM0=$(sha256sum "$G" | cut -d' ' -f1)

run "$B" inspect "$G"
expect_rc 0 "inspect .gguf"
expect_in "$T/out" "30 layers, hidden 576, intermediate 1536, heads 9 (kv 3, head_dim 64), vocab 49152" \
    "inspect shape"

run "$B" --json convert "$G" -o "$W/hf"
expect_rc 0 "convert"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json \
    special_tokens_map.json generation_config.json llmquant_report.json; do
    CHECKS=$((CHECKS + 1))
    [ -s "$W/hf/$f" ] || fail "convert output lacks $f"
done
expect_in "$W/hf/config.json" '"model_type": "llama"' "config model_type"
expect_in "$W/hf/config.json" '"tie_word_embeddings": true' "config tied embeddings"
expect_in "$W/hf/config.json" '"torch_dtype": "float16"' "config dtype"
expect_in "$W/hf/tokenizer.json" '"type":"Digits","individual_digits":true' "smollm digit split"

# quantize and evaluate straight from the file
run "$B" --json rtn "$G" -o "$W/rtn" --group-size 64
expect_rc 0 "rtn from .gguf"
expect_in "$T/out" '"quantized_linears":210' "rtn quantizes every linear at g64"
CHECKS=$((CHECKS + 1))
[ -s "$W/rtn/tokenizer.json" ] && [ -s "$W/rtn/generation_config.json" ] ||
    fail "rtn output lacks the tokenizer rebuilt from the GGUF"
# the default group (128) does not divide 576: a smaller one that divides every linear is used
run "$B" --json rtn "$G" -o "$W/rtn-default"
expect_rc 0 "rtn at the default group size"
expect_in "$T/err" "group size 128 does not divide every linear's in_features; using 64" \
    "default group size adapted, with a notice"
expect_in "$T/out" '"group_size":64' "report gives the group size used"
expect_in "$T/out" '"quantized_linears":210' "every linear quantized"
run "$B" --json rtn "$G" -o "$W/rtn-128" --group-size 128 -q
expect_rc 0 "an explicit --group-size 128 is kept"
expect_in "$T/out" '"group_size":128' "explicit group size kept"
run "$B" --json gptq "$G" -o "$W/gptq-builtin" --group-size 64 --nsamples 4 --seqlen 256
expect_rc 0 "gptq from .gguf (built-in calibration)"
# GPTQ fits the layers on its calibration text: calibrated on the evaluation text itself it must
# beat RTN there (with a few thousand tokens of other text it may not, out of domain)
run "$B" --json gptq "$G" -o "$W/gptq" --group-size 64 --nsamples 4 --seqlen 256 --calib "$TEXT"
expect_rc 0 "gptq from .gguf (calibrated on the evaluation text)"
ppl_of() { # model -> stdout value
    "$B" -q ppl "$1" --data "$TEXT" --ctx 256 | sed 's/^ppl //'
}
P_GGUF=$(ppl_of "$G")
P_HF=$(ppl_of "$W/hf")
P_RTN=$(ppl_of "$W/rtn")
P_GPTQ=$(ppl_of "$W/gptq")
P_GB=$(ppl_of "$W/gptq-builtin")
echo "ppl on the demo text: gguf $P_GGUF, converted fp16 $P_HF, rtn w4 g64 $P_RTN, gptq w4 g64" \
    "$P_GPTQ (built-in calibration: $P_GB)"
CHECKS=$((CHECKS + 1))
awk "BEGIN { d = $P_HF / $P_GGUF - 1; exit !(d < 0.005 && d > -0.005) }" ||
    fail "converted fp16 ppl $P_HF vs the GGUF's $P_GGUF: more than 0.5% apart"
CHECKS=$((CHECKS + 1))
awk "BEGIN { exit !($P_RTN > $P_HF && $P_RTN < 3 * $P_HF && $P_GPTQ < $P_RTN && $P_GPTQ > $P_HF \
    && $P_GB > $P_HF && $P_GB < 3 * $P_HF) }" ||
    fail "quantized ppl out of range: rtn $P_RTN, gptq $P_GPTQ, gptq built-in $P_GB vs fp16 $P_HF"
# CI runs the suite twice on one disk: keep what this test leaves behind small
rm -rf "$W/hf" "$W/rtn" "$W/rtn-default" "$W/rtn-128" "$W/gptq" "$W/gptq-builtin"

# Gemma-3: inspect names the family; RTN straight from the .gguf writes a checkpoint whose norm
# weights are the Hugging Face ones (llama.cpp stored 1 + w)
run "$B" inspect "$GEMMA"
expect_rc 0 "gemma-3 inspect"
expect_in "$T/out" "18 layers, hidden 640, intermediate 2048, heads 4 (kv 1, head_dim 256)" \
    "gemma-3 inspect shape"
run "$B" --json rtn "$GEMMA" -o "$W/gemma" --group-size 128
expect_rc 0 "gemma-3 rtn from .gguf"
expect_in "$T/out" '"quantized_linears":126' "gemma-3 rtn quantizes every linear"
expect_in "$W/gemma/config.json" '"model_type": "gemma3_text"' "gemma-3 config model_type"
CHECKS=$((CHECKS + 1))
[ -s "$W/gemma/tokenizer.model" ] || fail "gemma-3 rtn output lacks tokenizer.model"
rm -rf "$W/gemma"

# a truncated file: its own exit code, naming the file
head -c 1000000 "$G" >"$W/trunc.gguf"
run "$B" rtn "$W/trunc.gguf" -o "$W/trunc-out"
expect_error 31 "$W/trunc.gguf: " "truncated GGUF"
CHECKS=$((CHECKS + 1))
[ ! -e "$W/trunc-out" ] || fail "output created from a truncated file"
CHECKS=$((CHECKS + 1))
[ "$(sha256sum "$G" | cut -d' ' -f1)" = "$SUM0" ] || fail "the GGUF input changed"
finish
