#!/usr/bin/env python3
"""Our tokenizers against python sentencepiece / tokenizers, live: the committed cases plus a
fresh batch of random strings (another seed than gen_oracle_vectors.py), every vector set of
tests/data/tok/, and the whole WikiText-2 test join with the Llama-2 tokenizer.model (ids and
time, ours via bench_tok vs sentencepiece). Skips (exit 77) without the packages or the build."""
import os
import random
import subprocess
import sys

import tempfile
import time
import lq_oracle  # tests/py/lq_oracle.py: SKIP, or FAIL when oracles are required

try:
    import sentencepiece  # noqa: F401
    import tokenizers  # noqa: F401
    import google.protobuf  # noqa: F401
except ImportError as e:
    lq_oracle.skip(f"{e}")

build, src = os.environ.get("LQ_BUILD"), os.environ.get("LQ_SRC")
shared = os.environ.get("LQ_SHARED", "")
if not build or not src:
    lq_oracle.skip("LQ_BUILD / LQ_SRC not set")
data = os.path.join(src, "tests", "data", "tok")
sys.path.insert(0, data)
import gen_oracle_vectors as gv  # noqa: E402

exe = os.path.join(build, "tests", "test_tokenizer")
cases = gv.read_cases(data)
rng = random.Random(98765)
pools = ["abcdefghij", "XYZ", "0123456789", " ", "  \n\t\r", ".,;:!?'\"-()@_", "éüßçñÅ",
         "日本中文한", "🦙🤗👍", "\u0301\u00a0\u200b\u3000", "▁<>/|", "<ns1>", "hello world",
         "@-@", " the end", "Valkyria", "<s>", "<|endoftext|>", "<0x41>", "'s 're 'LL"]
for _ in range(400):
    cases.append("".join(rng.choice(rng.choice(pools)) for _ in range(rng.randint(1, 30))))

refs = gv.load_refs(shared, data)
files = {"llama2_spm": os.path.join(shared, "tokenizers/llama2/tokenizer.model"),
         "small_spm": os.path.join(data, "small_spm.model"),
         "llama2_hf": os.path.join(data, "llama2_hf.json"),
         "gpt2style": os.path.join(data, "gpt2style.json"),
         "qwenstyle": os.path.join(data, "qwenstyle.json")}
fail = 0
with tempfile.TemporaryDirectory() as d:
    cpath = os.path.join(d, "cases.txt")
    with open(cpath, "w") as f:
        for c in cases:
            f.write(c.encode("utf-8").hex() + "\n")
    meta = os.path.join(d, "llama2_meta.json")
    with open(meta, "w", encoding="utf-8") as f:
        f.write(gv.metaspace_variant(open(files["llama2_hf"], encoding="utf-8").read()))
    files["llama2_meta"] = meta
    for name, enc in refs.items():
        out = subprocess.run([exe, "--encode", files[name], cpath], check=True,
                             capture_output=True, text=True).stdout.split("\n")
        bad = 0
        for i, c in enumerate(cases):
            want = enc(c)
            got = [int(x) for x in out[i].split()]
            if got != want:
                bad += 1
                if bad <= 3:
                    print(f"{name} case {i} {c!r}:\n  ours {got}\n  ref  {want}")
        print(f"{name}: {len(cases)} cases, {bad} differ")
        fail += bad

llama = files["llama2_spm"]
join = os.path.join(shared, "data/wikitext2/wikitext2_test_hf_join.txt")
if os.path.exists(llama) and os.path.exists(join):
    sp = sentencepiece.SentencePieceProcessor(model_file=llama)
    text = open(join, encoding="utf-8").read()
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        ids = sp.encode(text)
        best = min(best, time.perf_counter() - t0)
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    print(f"sentencepiece {sentencepiece.__version__}: {len(text.encode())} bytes -> {len(ids)} "
          f"ids in {best:.3f} s: {len(ids) / best:.0f} tokens/s, hash {h:016x}")
    bench = os.path.join(build, "bench", "bench_tok")
    if os.path.exists(bench):
        line = subprocess.run([bench, llama, join, "3"], check=True, capture_output=True,
                              text=True).stdout.strip()
        print(line)
        if f"hash {h:016x}" not in line or f"-> {len(ids)} ids" not in line:
            print("whole-text ids differ from sentencepiece")
            fail += 1
# The demo model's tokenizer.model (rebuilt from llama2.c's tok512.bin by
# scripts/make_demo_model.py): ours vs sentencepiece on the shipped demo text and WikiText-2.
demo = os.path.join(src, "examples", "stories260K")
sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(demo, "tokenizer.model"))
for text_file in (os.path.join(src, "examples", "data", "tinystories_sample.txt"), join):
    if not os.path.exists(text_file):
        lq_oracle.skip_part(f"{text_file} not found")
        continue
    want = [sp.bos_id()] + sp.encode(open(text_file, encoding="utf-8").read())
    got = [int(x) for x in subprocess.run([exe, "--ids", demo, text_file], check=True,
                                          capture_output=True, text=True).stdout.split()]
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    ok = got == want
    print(f"{'ok  ' if ok else 'FAIL'} demo tokenizer.model on {os.path.basename(text_file)}: "
          f"{len(got)} ids, sentencepiece {len(want)}, first difference {first}")
    fail += not ok
sys.exit(1 if fail else 0)
