"""The table of bench/quality.sh's reports: one markdown row per report, each perplexity also
relative to the 16-bit model scored the same way (llama-perplexity for GGUF files, llmquant ppl
for checkpoints).

    python3 bench/quality_table.py WORK/reports
    python3 bench/quality_table.py --doc "TITLE=WORK/reports" ... > docs/quality.md
"""
import json
import os
import sys


def table(d):
    rows = [json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.endswith(".json")]
    by_name = {r["name"]: r for r in rows}
    out = ["| quantizer | config | bits/weight | WikiText-2 ppl | vs its 16-bit | llama-model.cpp ppl"
           " | vs its 16-bit | conversion s | file MiB |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (-r["bpw"], r["wiki"])):
        # GGUF files (llama.cpp's, and llmquant's --format gguf) are scored by llama-perplexity
        gguf = r["quantizer"].startswith("llama.cpp") or r["name"].startswith("gguf-")
        b = by_name.get("llama-f16" if gguf else "fp16")
        rel = lambda k: f"{(r[k] / b[k] - 1) * 100:+.2f}%" if b and b is not r else ""
        out.append(f"| {r['quantizer']} | {r['config']} | {r['bpw']:.3f} | {r['wiki']:.4f} |"
                   f" {rel('wiki')} | {r['code']:.4f} | {rel('code')} | {r['seconds']} |"
                   f" {r.get('bytes', 0) / 2**20:.1f} |")
    return "\n".join(out)


def doc(sections):
    out = ["# Quality at equal file size", "",
           "Written by `bench/quality_table.py --doc` from the reports of `bench/quality.sh MODEL "
           "BUILD WORK` (rows are resumable: the line under each title names the last run that added "
           "rows, with the machine, threads, version and windows every row shares). "
           "Perplexity by llama.cpp's protocol on both sides, ctx 512; GGUF files scored by "
           "llama-perplexity, checkpoints by `llmquant ppl --protocol llamacpp`; bits per weight "
           "of the decoder linears; calibration and importance matrix from the same text.", ""]
    for sec in sections:
        title, d = sec.split("=", 1)
        run = os.path.join(d, "run.txt")
        out += ["## " + title, ""]
        if os.path.exists(run):
            out += ["`" + open(run).read().strip().lstrip("# ") + "`", ""]
        out += [table(d), ""]
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1] == "--doc":
        print(doc(sys.argv[2:]), end="")
    else:
        print(table(sys.argv[1]))
