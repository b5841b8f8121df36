#!/usr/bin/env bash
# llmquant's GPTQ against GPTQModel's on the same token windows (issue #16, item 1): stories260K,
# w4 g64 (one group per row: hidden 64) and g32, with and without act-order, the reference
# Hessian (--no-v-attn-weights), damping 0.01, true-sequential; GPTQModel told to leave the MLP
# alone (its in/out width 172 does not pack into GPTQ's int32 words; GPTQModel pads it, llmquant
# keeps it in fp16), so both quantize the same 20 attention linears. Prints, per setting, how
# many of the 80 arrays (qweight, qzeros, scales, g_idx) differ, and both perplexities
# (WikiText-2 test join, GPTQ protocol, ctx 512).
#
#   GPTQMODEL_PY=/path/to/python bench/gptqmodel_equivalence.sh BUILD_DIR WORK_DIR
#
# GPTQMODEL_PY: a Python with gptqmodel (7.7 measured), zstandard and safetensors importable.
set -euo pipefail
BUILD=$(cd "$1" && pwd) WORK=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
PY=${GPTQMODEL_PY:?set GPTQMODEL_PY to a python with gptqmodel}
LQ=$BUILD/llmquant
M=$SHARED/models/stories260K
TOK=(--tokenizer "$M/llama2c/tok512.bin")
TEST=$SHARED/data/wikitext2/wikitext2_test_hf_join.txt
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
cd "$WORK" # GPTQModel writes a logs/ folder where it runs
# GPTQModel loads a tokenizer with the model: a 512-id word-level one stands in (it is never
# used: the calibration is token ids).
if [ ! -f "$WORK/model/tokenizer.json" ]; then
    mkdir -p "$WORK/model"
    cp "$M/config.json" "$M/model.safetensors" "$WORK/model/"
    "$PY" - "$WORK/model" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
names = ["<unk>", "<s>", "</s>"] + ["t%d" % i for i in range(3, 512)]
tk = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token="<unk>"))
tk.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                        unk_token="<unk>", pad_token="<unk>").save_pretrained(sys.argv[1])
PY
fi
ppl() { "$LQ" -q --json ppl "$1" --data "$TEST" --ctx 512 "${TOK[@]}" | grep -o '"ppl":[0-9.]*' | cut -d: -f2; }
echo "# $(date -u +%FT%TZ) $(uname -n), $("$LQ" --version)," \
    "$("$PY" -c 'import gptqmodel; print("GPTQModel", gptqmodel.__version__)' 2>/dev/null | tail -1)"
echo
echo "| setting | arrays differing (of 80) | llmquant ppl | GPTQModel ppl |"
echo "|---|---:|---:|---:|"
for g in 64 32; do
    for act in 0 1; do
        name=g$g-act$act
        a=()
        [ $act = 0 ] || a=(--desc-act)
        "$LQ" -q gptq "$WORK/model" -o "$WORK/lq-$name" --force --group-size "$g" "${a[@]}" \
            --no-v-attn-weights --calib "$SHARED/data/wikitext2/wiki.valid.tokens" \
            --nsamples 32 --seqlen 512 --cache-dir "$WORK/cc" "${TOK[@]}"
        win=$(ls "$WORK"/cc/*/windows.lqc | head -1)
        rm -rf "$WORK/gm-$name"
        GPTQMODEL_CPU_WORKERS=$(nproc) "$PY" "$ROOT/bench/quality_gptqmodel.py" "$WORK/model" \
            "$win" "$WORK/gm-$name" bits=4 group_size="$g" desc_act=$([ $act = 1 ] && echo True || echo False) \
            'dynamic={"-:.*mlp.*": {}}' >"$WORK/gm-$name.log" 2>&1
        diff=$("$PY" - "$WORK/lq-$name" "$WORK/gm-$name" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a = load_file(sys.argv[1] + "/model.safetensors")
b = load_file(sys.argv[2] + "/model.safetensors")
keys = [k for k in a if k.endswith(("qweight", "qzeros", "scales", "g_idx"))]
print(sum(not (k in b and np.array_equal(a[k], b[k])) for k in keys))
PY
        )
        echo "| w4 g$g$([ $act = 1 ] && echo ' act-order') | $diff | $(ppl "$WORK/lq-$name") | $(ppl "$WORK/gm-$name") |"
    done
done
