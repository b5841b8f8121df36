#!/usr/bin/env python3
"""Generates the malformed inputs in tests/data/bad/ (committed; rerun only to change them):
    python3 tests/data/bad/make_bad.py tests/data/bad
Each file name carries the status the reader must return: <case>.<LQ_ERR_NAME>.<ext>."""
import json
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def st(header, data=b"", hlen=None, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    n = len(h) if hlen is None else hlen
    return struct.pack("<Q", n) + h + data


ok = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
cases = {
    "empty.LQ_ERR_ST_TRUNCATED": b"",
    "short_prefix.LQ_ERR_ST_TRUNCATED": b"\x10\x00\x00",
    "header_past_eof.LQ_ERR_ST_TRUNCATED": st(ok, b"\0" * 8, hlen=4096),
    "header_zero.LQ_ERR_ST_HEADER_SIZE": st(None, b"", hlen=0, raw_header=b""),
    "header_huge.LQ_ERR_ST_HEADER_SIZE": struct.pack("<Q", 1 << 40) + b"{}",
    "header_not_utf8.LQ_ERR_ST_HEADER_UTF8": st(None, raw_header=b'{"\xff\xfe":{}}'),
    "header_overlong_utf8.LQ_ERR_ST_HEADER_UTF8": st(None, raw_header=b'{"\xc0\xaf":1}'),
    "header_not_json.LQ_ERR_ST_HEADER_JSON": st(None, raw_header=b'{"a": [1, 2'),
    "header_array.LQ_ERR_ST_HEADER_JSON": st(None, raw_header=b"[1,2,3]"),
    "entry_missing_dtype.LQ_ERR_ST_HEADER_JSON": st({"a": {"shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
    "entry_neg_shape.LQ_ERR_ST_HEADER_JSON": st({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8),
    "metadata_not_strings.LQ_ERR_ST_HEADER_JSON": st({"__metadata__": {"k": 1}, **ok}, b"\0" * 8),
    "bad_dtype.LQ_ERR_ST_DTYPE": st({"a": {"dtype": "F24", "shape": [2], "data_offsets": [0, 6]}}, b"\0" * 6),
    "shape_mismatch.LQ_ERR_ST_SHAPE": st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
    "shape_overflow.LQ_ERR_ST_SHAPE": st({"a": {"dtype": "F32", "shape": [2**31, 2**31, 2**31], "data_offsets": [0, 8]}}, b"\0" * 8),
    "offsets_gap.LQ_ERR_ST_OFFSETS": st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                         "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, b"\0" * 12),
    "offsets_overlap.LQ_ERR_ST_OFFSETS": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                             "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
    "offsets_reversed.LQ_ERR_ST_OFFSETS": st({"a": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}}, b"\0" * 4),
    "offsets_not_from_zero.LQ_ERR_ST_OFFSETS": st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
    "data_truncated.LQ_ERR_ST_BOUNDS": st(ok, b"\0" * 5),
    "trailing_bytes.LQ_ERR_ST_BOUNDS": st(ok, b"\0" * 12),
    "duplicate_name.LQ_ERR_ST_DUPLICATE": st(None, b"\0" * 8, raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                                                     b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
    # additions: rules the reference parser (serde_json) enforces that cJSON alone would not
    "header_trailing_garbage.LQ_ERR_ST_HEADER_JSON": st(None, b"\0" * 8,
        raw_header=b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}xx      '),
    "header_control_byte.LQ_ERR_ST_HEADER_JSON": st(None, b"\0" * 8,
        raw_header=b'{"a\x01":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'),
    "header_deep_nesting.LQ_ERR_ST_HEADER_JSON": st(None, raw_header=b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}"),
    "metadata_not_object.LQ_ERR_ST_HEADER_JSON": st({"__metadata__": ["format", "pt"], **ok}, b"\0" * 8),
    "entry_not_object.LQ_ERR_ST_HEADER_JSON": st({"a": [1, 2]}),
    "offsets_three.LQ_ERR_ST_HEADER_JSON": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, b"\0" * 8),
    "offsets_fraction.LQ_ERR_ST_HEADER_JSON": st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.5]}}, b"\0" * 8),
    "shape_not_array.LQ_ERR_ST_HEADER_JSON": st({"a": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, b"\0" * 8),
    # valid for Python safetensors, beyond our LQ_ST_MAX_DIMS: "limit_" cases are ours alone
    "limit_nine_dims.LQ_ERR_UNSUPPORTED": st({"a": {"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}}, b"\0"),
    # "a\u0000x" would read as "a" in C and alias tensor "a"
    "limit_name_escaped_nul.LQ_ERR_ST_HEADER_JSON": st(None, b"\0" * 8,
        raw_header=b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                   b'"a\\u0000x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
    "dtype_lowercase.LQ_ERR_ST_DTYPE": st({"a": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8),
    "offsets_past_eof.LQ_ERR_ST_BOUNDS": st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                             "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 4),
}
for name, data in cases.items():
    with open(os.path.join(out, name + ".safetensors"), "wb") as f:
        f.write(data)

# Sharded sets: directories with an index.
good_a = st({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
good_b = st({"y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
dup_b = st({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
shard_cases = {
    "shard_missing_file.LQ_ERR_ST_INDEX": ({"x": "a.safetensors", "y": "b.safetensors"}, {"a.safetensors": good_a}),
    "shard_tensor_absent.LQ_ERR_ST_INDEX": ({"x": "a.safetensors", "z": "a.safetensors"}, {"a.safetensors": good_a}),
    "shard_duplicate.LQ_ERR_ST_DUPLICATE": ({"x": "a.safetensors"}, {"a.safetensors": good_a, "b.safetensors": dup_b}),
    "shard_no_weight_map.LQ_ERR_ST_INDEX": (None, {"a.safetensors": good_a}),
    "shard_path_escape.LQ_ERR_ST_INDEX": ({"x": "../a.safetensors"}, {"a.safetensors": good_a}),
    "shard_wrong_file.LQ_ERR_ST_INDEX": ({"x": "b.safetensors", "y": "a.safetensors"},
                                         {"a.safetensors": good_a, "b.safetensors": good_b}),
    "shard_empty_name.LQ_ERR_ST_INDEX": ({"x": ""}, {"a.safetensors": good_a}),
    "shard_bad_shard.LQ_ERR_ST_OFFSETS": ({"x": "a.safetensors"}, {"a.safetensors": st(
        {"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8)}),
    "shard_index_not_json.LQ_ERR_ST_INDEX": ("not json", {"a.safetensors": good_a}),
}
for name, (wm, files) in shard_cases.items():
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for fn, data in files.items():
        with open(os.path.join(d, fn), "wb") as f:
            f.write(data)
    idx = {"metadata": {"total_size": 8}}
    if wm is not None:
        idx["weight_map"] = wm
    if name.startswith("shard_duplicate"):
        idx["weight_map"] = {"x": "a.safetensors", "y": "b.safetensors"}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        if wm == "not json":
            f.write('{"metadata": {"total_size": 8}, "weight_map": {"x": "a.safetensors"')
        else:
            json.dump(idx, f)

# config.json cases (each a directory with config.json).
base = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
    "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": True}
cfg_cases = {
    "cfg_gpt_neox.LQ_ERR_UNSUPPORTED_ARCH": {**base, "model_type": "gpt_neox"},
    "cfg_missing_hidden.LQ_ERR_CONFIG_MISSING_KEY": {k: v for k, v in base.items() if k != "hidden_size"},
    "cfg_heads_indivisible.LQ_ERR_CONFIG_VALUE": {**base, "num_attention_heads": 7},
    "cfg_kv_indivisible.LQ_ERR_CONFIG_VALUE": {**base, "num_key_value_heads": 3},
    "cfg_hidden_string.LQ_ERR_CONFIG_VALUE": {**base, "hidden_size": "64"},
    "cfg_negative.LQ_ERR_CONFIG_VALUE": {**base, "vocab_size": -1},
    "cfg_rope_yarn.LQ_ERR_UNSUPPORTED_ARCH": {**base, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    "cfg_gelu.LQ_ERR_UNSUPPORTED_ARCH": {**base, "hidden_act": "gelu"},
    "cfg_rope_dynamic.LQ_ERR_UNSUPPORTED_ARCH": {**base, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
    "cfg_llama3_no_low_freq.LQ_ERR_CONFIG_MISSING_KEY": {**base, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    "cfg_rope_not_object.LQ_ERR_CONFIG_VALUE": {**base, "rope_scaling": "linear"},
    "cfg_eos_strings.LQ_ERR_CONFIG_VALUE": {**base, "eos_token_id": ["</s>"]},
    "cfg_head_dim_odd.LQ_ERR_CONFIG_VALUE": {**base, "head_dim": 7},
    "cfg_kv_zero.LQ_ERR_CONFIG_VALUE": {**base, "num_key_value_heads": 0},
    "cfg_layers_float.LQ_ERR_CONFIG_VALUE": {**base, "num_hidden_layers": 5.5},
    "cfg_tie_string.LQ_ERR_CONFIG_VALUE": {**base, "tie_word_embeddings": "true"},
    "cfg_arch_seqcls.LQ_ERR_UNSUPPORTED_ARCH": {**base, "architectures": ["LlamaForSequenceClassification"]},
    "cfg_no_model_type.LQ_ERR_CONFIG_MISSING_KEY": {k: v for k, v in base.items() if k != "model_type"},
    # sizes no real model has (inspect used to overflow on hidden_size 1e12)
    "cfg_hidden_1e12.LQ_ERR_CONFIG_VALUE": {**base, "hidden_size": 10 ** 12},
    "cfg_params_absurd.LQ_ERR_CONFIG_VALUE": {**base, "hidden_size": 1 << 24, "intermediate_size": 1 << 24,
                                              "num_hidden_layers": 1 << 16, "num_attention_heads": 1 << 12,
                                              "num_key_value_heads": 1 << 12},
    # transformers looks up rope type None and fails; we used to ignore the factor
    "cfg_rope_factor_no_type.LQ_ERR_CONFIG_VALUE": {**base, "rope_scaling": {"factor": 8.0}},
}
for name, cfg in cfg_cases.items():
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
d = os.path.join(out, "cfg_not_json.LQ_ERR_JSON")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "config.json"), "w") as f:
    f.write('{"model_type": "llama", ')
for name, text in {"cfg_trailing_data.LQ_ERR_JSON": json.dumps(base) + "\n}",
                   "cfg_deep_nesting.LQ_ERR_JSON": '{"a":' + "[" * 4000 + "]" * 4000 + "}",
                   "cfg_top_array.LQ_ERR_CONFIG_VALUE": "[1, 2]",
                   # Python's json keeps the last value, cJSON the first: refused
                   "cfg_duplicate_key.LQ_ERR_JSON": json.dumps(base)[:-1] + ', "hidden_size": 128}',
                   "cfg_escaped_nul.LQ_ERR_JSON": json.dumps({**base, "model_type": "llama\u0000x"})}.items():
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(text)
