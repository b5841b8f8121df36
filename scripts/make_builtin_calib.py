#!/usr/bin/env python3
"""Build llmquant's built-in calibration corpus, calib/data/builtin_calib.txt.zst, and its
provenance file calib/data/SOURCES.md (run once by a developer; both are committed and the
corpus is compiled into the library, so a binary copied alone still has it).

The mix, by Llama-2 tokens (sentencepiece, shared/tokenizers/llama2/tokenizer.model):
  encyclopedic prose  ~75%  WikiText-2 validation (shared/data/wikitext2/wiki.valid.tokens; the
                            test split is never used)
  source code         ~10%  Python standard library modules (Debian libpython3.11-stdlib/-minimal,
                            PSF-2.0); C examples of zstd (BSD-3-Clause or GPL-2.0) and zlib
                            (zlib licence / public domain) from Debian libzstd-dev, zlib1g-dev
  technical prose     ~10%  GNU manuals in Info format: coreutils, grep, sed, diffutils
                            (GFDL-1.3+), Debian coreutils/grep/sed/diffutils
  multilingual         ~4%  translated messages (msgstr) of coreutils, grep, sed, diffutils in
                            twelve languages, from their .mo catalogues (GPL-3.0+)
Why prose dominates: GPTQ/AWQ fit the layer outputs on the calibration activations, and a set
that is mostly code or non-English text moves the fit away from ordinary prose. Measured on
SmolLM2-135M (GPTQ w4 g64, 16 x 512 windows, WikiText-2 test): calibrating on the code part alone
gave ppl 50.5, on the multilingual part 51.0, on the GNU manuals 43.2, on WikiText-2 validation
31.8 to 34.0 (RTN: 33.0); the first mix (40/30/20/10) 36.4.
Documents of about 6 KB are cut from every source and shuffled together with a fixed seed, so
any 2048-token window mixes a little of everything; documents are joined by a blank line. No
dialogue source with a redistributable licence was found in Debian or PyPI packages here.

usage: scripts/make_builtin_calib.py [SHARED_DIR]   (default ../shared)
needs: sentencepiece (token counts), zstd (the command), the Debian packages above"""
import glob
import gzip
import hashlib
import os
import random
import re
import struct
import subprocess
import sys

import sentencepiece

VERSION = "llmquant-calib-v2"
shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out_dir = os.path.join(root, "calib", "data")
sp = sentencepiece.SentencePieceProcessor(
    model_file=os.path.join(shared, "tokenizers", "llama2", "tokenizer.model"))
DOC = 6000  # characters per document


def ntok(s):
    return len(sp.encode(s))


def pkg(path):
    """Debian package and version that ships a file."""
    name = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True).stdout
    name = name.split(":")[0].strip()
    ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True,
                         text=True).stdout.strip()
    return f"{name} {ver}"


def chunks(text, size=DOC):
    """Cut at paragraph boundaries into pieces of about `size` characters."""
    out, cur = [], []
    n = 0
    for para in re.split(r"\n\s*\n", text):
        para = para.strip("\n")
        if not para.strip():
            continue
        cur.append(para)
        n += len(para)
        if n >= size:
            out.append("\n\n".join(cur))
            cur, n = [], 0
    if cur:
        out.append("\n\n".join(cur))
    return out


def take(docs, budget):
    """Documents in order until `budget` tokens."""
    got, n = [], 0
    for d in docs:
        if n >= budget:
            break
        got.append(d)
        n += ntok(d)
    return got, n


sources = []  # (section, what, files/packages, licence, docs, tokens)

# --- encyclopedic: WikiText-2 validation --------------------------------------------------------
wv = os.path.join(shared, "data", "wikitext2", "wiki.valid.tokens")
text = open(wv, encoding="utf-8").read()
# articles start with " = Title = " lines; keep whole articles as documents
arts = re.split(r"\n(?= = [^=].* = \n)", text)
docs = [a.strip() for a in arts if len(a.strip()) > 500]
d, n = take(docs, 265_000)
sources.append(("encyclopedic prose", "WikiText-2 validation split, the first articles up to the "
                "token budget (raw WikiText tokenization: spaced punctuation, @-@, <unk>)",
                "shared/data/wikitext2/wiki.valid.tokens (pytorch/examples @77f55b91 "
                ": word_language_model/data/wikitext-2/valid.txt)",
                "CC BY-SA 3.0 (Wikipedia text; Merity et al. 2016)", d, n))

# --- source code --------------------------------------------------------------------------------
py_mods = ["textwrap", "heapq", "bisect", "fractions", "statistics", "string", "shlex", "difflib",
           "calendar", "csv", "dataclasses", "functools", "pprint", "graphlib", "colorsys",
           "fnmatch", "glob", "base64", "queue", "sched", "ipaddress", "argparse", "gettext",
           "tokenize", "json/decoder", "json/encoder", "collections/__init__", "email/utils",
           "html/parser", "urllib/parse"]
py_files = [f"/usr/lib/python3.11/{m}.py" for m in py_mods]
code_docs = []
for f in py_files:
    code_docs += chunks(open(f, encoding="utf-8").read())
c_files = sorted(glob.glob("/usr/share/doc/libzstd-dev/examples/*.c") +
                 glob.glob("/usr/share/doc/zlib1g-dev/examples/*.c"))
c_docs = []
for f in c_files:
    c_docs += chunks(open(f, encoding="utf-8", errors="strict").read())
rng = random.Random(1)
d1, n1 = take(code_docs, 24_000)
d2, n2 = take(c_docs, 12_000)
sources.append(("source code", "Python standard library modules: " + ", ".join(py_mods),
                pkg(py_files[0]) + ", " + pkg("/usr/lib/python3.11/argparse.py"),
                "PSF-2.0 (Python Software Foundation License)", d1, n1))
sources.append(("source code", "C examples of zstd and zlib: " +
                ", ".join(os.path.basename(f) for f in c_files),
                pkg(c_files[0]) + ", " + pkg(c_files[-1]),
                "zstd: BSD-3-Clause or GPL-2.0 (either); zlib examples: zlib licence / public "
                "domain (as stated in each file)", d2, n2))

# --- technical prose: GNU Info manuals ----------------------------------------------------------
info = ["coreutils", "grep", "sed", "diffutils"]
tech_docs = []
for m in info:
    t = gzip.open(f"/usr/share/info/{m}.info.gz", "rt", encoding="utf-8").read()
    t = t.split("\x1f", 2)[-1]  # drop the Info header
    t = re.sub(r"\x1f\nFile: [^\n]*\n", "\n", t)  # node headers
    t = t.replace("\x1f", "")
    t = re.sub(r"\* Menu:.*?(?=\n\n[^*])", "", t, flags=re.S)  # menus
    tech_docs += chunks(t)
rng.shuffle(tech_docs)
d, n = take(tech_docs, 36_000)
sources.append(("technical prose", "GNU manuals (Info): " + ", ".join(info),
                ", ".join(pkg(f"/usr/share/info/{m}.info.gz") for m in info),
                "GFDL-1.3-or-later (each manual's copying notice)", d, n))

# --- multilingual: message catalogues -----------------------------------------------------------
langs = ["de", "fr", "es", "it", "pt_BR", "nl", "pl", "sv", "ru", "uk", "ja", "zh_CN"]


def mo_strings(path):
    b = open(path, "rb").read()
    magic = struct.unpack_from("<I", b, 0)[0]
    e = "<" if magic == 0x950412de else ">"
    _, n, _, tt = struct.unpack_from(e + "4I", b, 4)
    out = []
    for i in range(1, n):  # entry 0 is the header
        ln, off = struct.unpack_from(e + "2I", b, tt + 8 * i)
        for s in b[off:off + ln].decode("utf-8", errors="strict").split("\0"):
            s = s.strip()
            if len(s) >= 25 and not s.startswith("%"):
                out.append(s)
    return out


ml_docs, mo_files = [], []
for lang in langs:
    msgs = []
    for m in info:
        p = f"/usr/share/locale/{lang}/LC_MESSAGES/{m}.mo"
        if os.path.exists(p):
            mo_files.append(p)
            msgs += mo_strings(p)
    seen, uniq = set(), []
    for s in msgs:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    ml_docs += chunks("\n\n".join(uniq), 3000)
per_lang = {}
rng.shuffle(ml_docs)
d, n = take(ml_docs, 14_000)
sources.append(("multilingual", "translated program messages (msgstr) in " + ", ".join(langs),
                ", ".join(sorted({pkg(f) for f in mo_files})), "GPL-3.0-or-later", d, n))

# --- assemble -----------------------------------------------------------------------------------
all_docs = [doc for s in sources for doc in s[4]]
random.Random(20261124).shuffle(all_docs)
corpus = "\n\n".join(all_docs) + "\n"
corpus.encode("utf-8")  # valid UTF-8 by construction; fail loudly otherwise
os.makedirs(out_dir, exist_ok=True)
raw = os.path.join(out_dir, "builtin_calib.txt")
with open(raw, "w", encoding="utf-8") as f:
    f.write(corpus)
subprocess.run(["zstd", "-19", "-q", "-f", raw, "-o", raw + ".zst"], check=True)
os.remove(raw)
total = ntok(corpus)
digest = hashlib.sha256(corpus.encode("utf-8")).hexdigest()

lines = [f"# The built-in calibration corpus ({VERSION})", "",
         "`builtin_calib.txt.zst` is what `llmquant gptq|awq|int8` calibrate on when no `--calib` "
         "is given. It is compiled into the library (CMake turns it into a byte array), so a "
         "binary copied alone still has it; reports name it `builtin:" + VERSION + "`.", "",
         f"Regenerate: `scripts/make_builtin_calib.py ../shared` (Debian bookworm packages as "
         f"listed, sentencepiece for the token counts). Decompressed: {len(corpus.encode()):,} "
         f"bytes, {len(all_docs)} documents, {total:,} Llama-2 tokens (a 32k vocabulary; "
         f"128 x 2048 = 262,144 are needed), sha256 {digest}.", "",
         "Documents of about 6 KB are cut from each source at paragraph boundaries, shuffled "
         "together (fixed seed) and joined with a blank line.", "",
         "| part | what | from | licence | documents | Llama-2 tokens |",
         "|---|---|---|---|---:|---:|"]
for sec, what, frm, lic, docs, n in sources:
    lines.append(f"| {sec} | {what} | {frm} | {lic} | {len(docs)} | {n:,} ({100 * n / total:.0f}%) |")
lines += ["", "Every licence above allows redistribution of the text; the share-alike and copyleft "
          "ones (CC BY-SA 3.0, GFDL, GPL) apply to this corpus file as a collection of those "
          "works, not to the rest of llmquant. Not included: dialogue (no redistributable source "
          "in Debian or PyPI packages on the build machine), and the WikiText-2 test split (the "
          "evaluation text)."]
with open(os.path.join(out_dir, "SOURCES.md"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print(f"{raw}.zst: {os.path.getsize(raw + '.zst'):,} bytes compressed, {total:,} Llama-2 tokens")
for sec, what, frm, lic, docs, n in sources:
    print(f"  {sec:20s} {n:8,} tokens  {len(docs):4d} docs  {what[:60]}")
