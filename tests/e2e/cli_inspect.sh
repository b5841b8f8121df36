#!/usr/bin/env bash
# llmquant inspect on the bundled stories260K: human summary, --tensors, and --json checked
# against an independent reading of the checkpoint (Python safetensors) when available.
set -e
. "$(dirname "$0")/cli_lib.bash"
M="${LQ_SHARED:-}/models/stories260K"
if [ -z "${LQ_SHARED:-}" ] || [ ! -f "$M/model.safetensors" ]; then
    echo "SKIP: $M not available"
    exit 77
fi
B="$LQ_BIN"

run "$B" inspect "$M"
expect_rc 0 "inspect"
expect_in "$T/out" "llama (LlamaForCausalLM)" "inspect"
expect_in "$T/out" "5 layers, hidden 64, intermediate 172, heads 8 (kv 4, head_dim 8), vocab 512, context 512" "inspect"
expect_in "$T/out" "parameters  260032" "inspect"
expect_in "$T/out" "verified    logits vs transformers on stories260K" "inspect: what is checked of the family"
expect_in "$T/out" "KV cache    320.0 KiB (float16, ctx 512 x batch 1)" "inspect"
expect_in "$T/out" "47 (--tensors lists them)" "inspect"
CHECKS=$((CHECKS + 1))
[ -s "$T/err" ] && fail "inspect wrote to stderr: $(cat "$T/err")"

run "$B" inspect "$M" --tensors
expect_rc 0 "inspect --tensors"
CHECKS=$((CHECKS + 1))
n=$(grep -c '^  model\.' "$T/out" || true)
[ "$n" = 47 ] || fail "--tensors listed $n tensors, want 47"
expect_in "$T/out" "model.layers.4.mlp.down_proj.weight" "--tensors"

run "$B" inspect "$M" --ctx 100 --batch 3 --json
expect_rc 0 "inspect --json"
CHECKS=$((CHECKS + 1))
json_ok "$T/out" || fail "inspect --json is not valid JSON"
# with --json the human summary goes to stderr
expect_in "$T/err" "parameters  260032" "--json human to stderr"
cp "$T/out" "$T/inspect.json"
run "$B" --quiet inspect "$M" --json
expect_rc 0 "inspect --json --quiet"
CHECKS=$((CHECKS + 1))
[ -s "$T/err" ] && fail "--json --quiet wrote to stderr"

run "$B" inspect "$T/nowhere"
expect_error 5 "$T/nowhere: no such model directory or file" "inspect missing dir"
run "$B" inspect "$M" --batch 0
expect_error 2 "option --batch: 0 is outside" "inspect --batch 0"

if python3 -c "import safetensors, numpy" 2>/dev/null; then
    CHECKS=$((CHECKS + 1))
    python3 - "$M" "$T/inspect.json" <<'PY' || fail "inspect JSON disagrees with safetensors"
import json, sys
from safetensors import safe_open
model, rep = sys.argv[1], json.load(open(sys.argv[2]))
cfg = json.load(open(model + "/config.json"))
f = safe_open(model + "/model.safetensors", "np")
names = sorted(f.keys())
tensors = {t["name"]: t for t in rep["tensors"]}
assert sorted(tensors) == names, "tensor names differ"
params = 0
for n in names:
    a = f.get_tensor(n)
    t = tensors[n]
    assert t["shape"] == list(a.shape), (n, t["shape"], a.shape)
    assert t["bytes"] == a.nbytes, n
    assert t["dtype"] == {"float16": "F16", "float32": "F32", "bfloat16": "BF16"}[str(a.dtype)], n
    params += a.size
assert rep["parameters"] == params, (rep["parameters"], params)
assert rep["num_tensors"] == len(names)
hd = cfg["hidden_size"] // cfg["num_attention_heads"]
kv = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * hd * 100 * 3 * 2
assert rep["memory"]["kv_cache"]["bytes"] == kv, (rep["memory"]["kv_cache"], kv)
assert rep["memory"]["weights"]["fp16"] == 2 * params
for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"):
    key = {"num_hidden_layers": "num_layers"}.get(k, k)
    assert rep[key] == cfg[k], k
print("python oracle: %d tensors, %d parameters agree" % (len(names), params))
PY
elif command -v jq >/dev/null 2>&1; then
    # no Python oracle: at least the report must be self-consistent
    CHECKS=$((CHECKS + 1))
    s=$(jq '[.tensors[].shape | reduce .[] as $d (1; . * $d)] | add' "$T/inspect.json")
    p=$(jq .parameters "$T/inspect.json")
    [ "$s" = "$p" ] || fail "sum of tensor shapes $s != parameters $p"
else
    echo "note: neither python3+safetensors nor jq: JSON content not cross-checked"
fi
finish
