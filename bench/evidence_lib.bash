# Shared by bench/evidence_*.sh: one real model from a GGUF file through every method, each
# conversion and perplexity written as a JSON report under WORK/reports. Reports are written to a
# temporary name and renamed when complete, so an interrupted run leaves no half report behind
# and a rerun picks up where it stopped. LQ_ONLY="fp16 gptq-w4-g128 ..." restricts the runs to
# those names (the table shows them all).
#
#   evidence_start GGUF BUILD_DIR WORK_DIR BASE   copy the binary (so a rebuild does not disturb
#                                                 the run), cd WORK_DIR, convert GGUF to BASE/
#   ppl NAME MODEL / quant NAME METHOD ARGS...    one row (needs TEST and CHUNKS)
#   evidence_table                                the Markdown table of every report

evidence_start() {
    local gguf=$1 build=$2 work=$3
    EV_BASE=$4
    mkdir -p "$work/reports"
    work=$(cd "$work" && pwd)
    cp "$build/llmquant" "$work/llmquant"
    LQ=$work/llmquant
    EV_REPORTS=$work/reports
    cd "$work"
    echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, $($LQ --version), $(basename "$gguf")"
    [ -d "$EV_BASE" ] || $LQ -q convert "$gguf" -o "$EV_BASE"
}

wanted() { [ -z "${LQ_ONLY:-}" ] || [[ " $LQ_ONLY " == *" $1 "* ]]; }

ppl() { # name model
    wanted "$1" || return 0
    [ -s "reports/ppl-$1.json" ] && return 0
    $LQ --json ppl "$2" --data "$TEST" --chunks "$CHUNKS" >"reports/.ppl-$1.tmp" 2>/dev/null
    mv "reports/.ppl-$1.tmp" "reports/ppl-$1.json"
}

quant() { # name method args...
    local name=$1 method=$2
    shift 2
    wanted "$name" || return 0
    if [ ! -s "reports/q-$name.json" ]; then
        rm -rf "out-$name"
        $LQ --json "$method" "$EV_BASE" -o "out-$name" "$@" >"reports/.q-$name.tmp" \
            2>"reports/q-$name.log"
        mv "reports/.q-$name.tmp" "reports/q-$name.json"
    fi
    ppl "$name" "out-$name"
}

evidence_table() {
    python3 - "$EV_REPORTS" "$CHUNKS" <<'PY'
import json, os, sys
d, chunks = sys.argv[1], sys.argv[2]
def load(p):
    try:
        return json.load(open(os.path.join(d, p)))
    except Exception:
        return None
base = load("ppl-fp16.json")
print(f"\nWikiText-2 test join, GPTQ protocol, ctx 2048, first {chunks} windows "
      f"({base['tokens_scored'] if base else '?'} scored tokens)\n")
print("| model | ppl | vs fp16 | calibration | quantized linears | conversion | peak RSS |")
print("|---|---:|---:|---|---:|---:|---:|")
names = ["fp16"] + sorted(f[2:-5] for f in os.listdir(d) if f.startswith("q-") and f.endswith(".json"))
for n in names:
    p, q = load(f"ppl-{n}.json"), load(f"q-{n}.json") if n != "fp16" else None
    if not p:
        print(f"| {n} | (missing) |")
        continue
    rel = f"{(p['ppl'] / base['ppl'] - 1) * 100:+.2f}%" if base and n != "fp16" else ""
    cal = q.get("calib", "-") if q else "-"
    if q and q.get("nsamples"):
        cal += f", {q['nsamples']} x {q.get('seqlen', 2048)}"
    lin = f"{q['quantized_linears']}/{q['quantized_linears'] + q['unquantized_linears']}" if q else "-"
    t = f"{q['seconds']:.1f} s" if q else "-"
    rss = f"{(q or p)['peak_rss_bytes'] / 2**20:.0f} MiB"
    print(f"| {n} | {p['ppl']:.4f} | {rel} | {cal} | {lin} | {t} | {rss} |")
PY
}
