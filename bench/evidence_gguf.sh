#!/usr/bin/env bash
# One real model end to end, from a GGUF file (scripts/fetch_models.sh caches SmolLM2-135M and
# Gemma-3-270M): GGUF -> fp16 HF directory -> every method -> perplexity (GPTQ protocol,
# ctx 2048, WikiText-2 test join), conversion wall time and peak RSS. One table on stdout,
# every JSON report under WORK/reports.
#
#   bench/evidence_gguf.sh GGUF BUILD_DIR WORK_DIR [CHUNKS] [NSAMPLES]
#
# CHUNKS (default 40): perplexity on the first CHUNKS windows of 2048 tokens (0 = all).
# NSAMPLES (default 128): calibration windows of 2048 tokens for gptq / awq / int8.
# The binary is copied to WORK_DIR first, so rebuilding while this runs does not disturb it.
# LQ_ONLY="fp16 gptq-w4-g128 ..." restricts the runs to those names (the table shows them all).
# Reports are written to a temporary name and renamed when complete, so an interrupted run
# leaves no half report behind and a rerun picks up where it stopped.
set -euo pipefail
GGUF=$(realpath "$1")
BUILD=$(cd "$2" && pwd)
WORK=$3
CHUNKS=${4:-40}
NS=${5:-128}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
TEST=$SHARED/data/wikitext2/wikitext2_test_hf_join.txt
[ -f "$GGUF" ] || { echo "no $GGUF: run scripts/fetch_models.sh" >&2; exit 77; }
[ -f "$TEST" ] || { echo "no $TEST (shared data)" >&2; exit 77; }
mkdir -p "$WORK/reports"
cp "$BUILD/llmquant" "$WORK/llmquant"
LQ=$WORK/llmquant
cd "$WORK"
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, $($LQ --version), $(basename "$GGUF")"
[ -d model-f16 ] || $LQ -q convert "$GGUF" -o model-f16

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
        $LQ --json "$method" model-f16 -o "out-$name" "$@" >"reports/.q-$name.tmp" 2>"reports/q-$name.log"
        mv "reports/.q-$name.tmp" "reports/q-$name.json"
    fi
    ppl "$name" "out-$name"
}

ppl fp16 model-f16
quant rtn-w4-g128 rtn --bits 4 --group-size 128
quant rtn-w3-g128 rtn --bits 3 --group-size 128
quant nf4 nf4
quant int8 int8 --nsamples "$NS"
quant gptq-w4-g128 gptq --bits 4 --group-size 128 --nsamples "$NS"
quant gptq-w3-g128 gptq --bits 3 --group-size 128 --nsamples "$NS"
quant awq-w4-g128 awq --group-size 128 --nsamples "$NS"

python3 - "$WORK/reports" "$CHUNKS" "$NS" <<'PY'
import json, os, sys
d, chunks, ns = sys.argv[1], sys.argv[2], sys.argv[3]
def load(p):
    try:
        return json.load(open(os.path.join(d, p)))
    except Exception:
        return None
base = load("ppl-fp16.json")
print(f"\nWikiText-2 test join, GPTQ protocol, ctx 2048, first {chunks} windows "
      f"({base['tokens_scored'] if base else '?'} scored tokens); calibration {ns} x 2048\n")
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
    lin = f"{q['quantized_linears']}/{q['quantized_linears'] + q['unquantized_linears']}" if q else "-"
    t = f"{q['seconds']:.1f} s" if q else "-"
    rss = f"{(q or p)['peak_rss_bytes'] / 2**20:.0f} MiB"
    print(f"| {n} | {p['ppl']:.4f} | {rel} | {cal} | {lin} | {t} | {rss} |")
PY
