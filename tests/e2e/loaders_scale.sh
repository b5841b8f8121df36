#!/usr/bin/env bash
# Loaders stay linear (or n log n) on hostile sizes, and refuse what cannot be real with a clear
# error. The inputs are generated here (they would be megabytes committed). Each case runs under
# `timeout` as a guard against a return of quadratic/exponential behaviour, with a bound two
# orders above the time it takes now (the figures are in bench/, not here).
#   * an index naming 200k distinct shards (a linear search per entry took 136 s) and 60k
#   * a tokenizer.json with a Sequence of 16 ByteLevel pre-tokenizers (exponential: > 60 s, 2.7 GB)
#   * 100k added tokens sharing a first byte over 20k characters (a scan per position: 11 s),
#     2500 of them matched
#   * a safetensors header with 262145 tensors (refused before its JSON tree: 1M took 0.9 GB)
#   * a batch file of 10^5 jobs (two PATH_MAX buffers per job made it 1 GB to parse)
source "$(dirname "$0")/cli_lib.bash"
SRC=${LQ_SRC:?}
TOKBIN=${LQ_BUILD:-}/tests/test_tokenizer
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 generates the inputs"; exit 77; }
W=$T/scale
rm -rf "$W"
mkdir -p "$W"

guard() { # SECONDS CMD...: run with a time limit; 124 = it hung
    set +e
    timeout "$1" "${@:2}" >"$T/out" 2>"$T/err"
    RC=$?
    set -e
    CHECKS=$((CHECKS + 1))
    [ "$RC" != 124 ] || fail "$*: still running after $1 s"
}

python3 - "$W" <<'EOF'
import json, os, sys
w = sys.argv[1]
for n in (200000, 60000):
    d = os.path.join(w, f"idx{n}")
    os.makedirs(d)
    json.dump({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 512},
              open(os.path.join(d, "config.json"), "w"))
    wm = {f"t{i}": f"model-{i:06d}-of-{n:06d}.safetensors" for i in range(n)}
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
# GPT-2's bytes_to_unicode: every byte a printable character
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
vocab.update({f"<pad{i}>": 256 + i for i in range(44)})
base = {"version": "1.0", "normalizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": [], "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False}}
seq = dict(base, added_tokens=[],
           pre_tokenizer={"type": "Sequence", "pretokenizers": [
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": False}] * 16})
json.dump(seq, open(os.path.join(w, "bytelevel16.json"), "w"))
added = [{"id": 300 + i, "content": "x" + format(i, "05d"), "single_word": False, "lstrip": False,
          "rstrip": False, "normalized": False, "special": False} for i in range(100000)]
for i in range(100000):
    base["model"]["vocab"]["x" + format(i, "05d")] = 300 + i
json.dump(dict(base, added_tokens=added, pre_tokenizer=None),
          open(os.path.join(w, "added100k.json"), "w"))
open(os.path.join(w, "x20k.txt"), "w").write("xx00042x" * 2500)
import struct
n = (1 << 18) + 1
h = {f"t{i:07d}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
b = json.dumps(h, separators=(",", ":")).encode()
b += b" " * (-len(b) % 8)
os.makedirs(os.path.join(w, "many"))
json.dump({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": 512},
          open(os.path.join(w, "many", "config.json"), "w"))
with open(os.path.join(w, "many", "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(b)) + b + b"\0" * n)
with open(os.path.join(w, "jobs.jsonl"), "w") as f:
    for i in range(100000):
        f.write(json.dumps({"method": "rtn", "model": "no-such-model", "out": f"o{i}"}) + "\n")
EOF

guard 60 "$LQ_BIN" inspect "$W/idx200000"
expect_error 29 "200000 shard files (more than 65536)" "index with 200k shard names"
guard 60 "$LQ_BIN" inspect "$W/idx60000"
expect_error 29 "named in the index is missing" "index with 60k shard names"

guard 60 "$LQ_BIN" inspect "$W/many"
expect_error 9 "more than 262144 tensors in one file" "262145 tensors in one header"

# peak RSS of the 10^5-job batch over that of `llmquant --version` (shared libraries alone are
# ~270 MB with CUDA linked); under AddressSanitizer resident memory is the sanitizer's
RSS_LIMIT=100
grep -q __asan_init "$LQ_BIN" 2>/dev/null && RSS_LIMIT=100000
guard 120 python3 - "$LQ_BIN" "$W" "$RSS_LIMIT" <<'EOF'
import os, subprocess, sys
exe, w, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
def peak(args):
    pid = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=w).pid
    return os.wait4(pid, 0)[2].ru_maxrss / 1024
base = peak([exe, "--version"])
batch = peak([exe, "-q", "batch", "jobs.jsonl", "--shard", "0/100000"])
print(f"batch of 10^5 jobs: {batch:.0f} MiB peak, --version {base:.0f} MiB")
sys.exit(0 if batch - base < limit else 1)
EOF
expect_rc 0 "10^5-job batch file parse memory: $(cat "$T/out")"

if [ -x "$TOKBIN" ]; then
    guard 60 "$TOKBIN" --ids "$W/bytelevel16.json" "$W/x20k.txt"
    expect_rc 1 "16 ByteLevel pre-tokenizers"
    expect_in "$T/err" "more than one ByteLevel pre-tokenizer" "16 ByteLevel pre-tokenizers"
    guard 60 "$TOKBIN" --ids "$W/added100k.json" "$W/x20k.txt"
    expect_rc 0 "100k added tokens sharing a first byte"
    CHECKS=$((CHECKS + 2))
    [ "$(wc -l <"$T/out")" = 7500 ] || fail "100k added tokens: $(wc -l <"$T/out") ids, want 7500"
    [ "$(grep -cx 342 "$T/out")" = 2500 ] || fail "100k added tokens: x00042 (id 342) not matched"
else
    echo "SKIP part: $TOKBIN not built (tokenizer cases)"
fi
finish
