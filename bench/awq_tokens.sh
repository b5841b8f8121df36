#!/usr/bin/env bash
# AWQ's scale search on a subset of the calibration tokens (--awq-tokens) against the full search:
# perplexity of each output and its conversion time, one run on this machine.
#
#   bench/awq_tokens.sh MODEL_DIR BUILD_DIR WORK_DIR [NSAMPLES] [SEQLEN] [CHUNKS]
#
# Defaults: 32 x 512 built-in calibration tokens (the full search scores on all 16384), perplexity
# on the first 20 windows of 2048 tokens of WikiText-2 test (GPTQ protocol).
set -euo pipefail
MODEL=$1 BUILD=$(cd "$2" && pwd) WORK=$3 N=${4:-32} S=${5:-512} CH=${6:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${LQ_SHARED:-$ROOT/../shared}/data/wikitext2/wiki.test.raw
LQ=$BUILD/llmquant
mkdir -p "$WORK"
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, $($LQ --version), $MODEL, $N x $S" \
    "calibration tokens, ppl: $CH x 2048 of $(basename "$DATA")"
ppl() { "$LQ" -q --json ppl "$1" --data "$DATA" --ctx 2048 --chunks "$CH" |
    python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['ppl']:.4f}\")"; }
fp=$(ppl "$MODEL")
echo
echo "| --awq-tokens | search tokens | wall s | ppl | vs full search | vs float |"
echo "|---:|---:|---:|---:|---:|---:|"
full=
for T in $((N * S)) 8192 4096 2048; do
    [ -z "$full" ] || [ "$T" -lt $((N * S)) ] || continue # the full search once
    "$LQ" -q --json awq "$MODEL" -o "$WORK/awq-$T" --force --nsamples "$N" --seqlen "$S" \
        --awq-tokens "$T" >"$WORK/awq-$T.json"
    p=$(ppl "$WORK/awq-$T")
    full=${full:-$p}
    python3 - "$WORK/awq-$T.json" "$T" "$p" "$full" "$fp" "$S" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t, p, full, fp, s = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
print(f"| {t} | {max(t // s, 1) * s} | {r['seconds']:.1f} | {p:.4f} | {100 * (p / full - 1):+.2f}% | "
      f"{100 * (p / fp - 1):+.2f}% |")
PY
done
echo
echo "float model: $fp"
