#!/usr/bin/env bash
# Conversion time in forward-pass equivalents (issue #13): wall time of each calibrated method
# divided by the time of one float32 forward of the same model over the same calibration tokens
# (bench_forward, layers only: calibration never runs the lm_head), both measured in this run on
# this machine with the same threads. Also the peak RSS of each conversion.
#
#   bench/conversion_fpe.sh MODEL_DIR BUILD_DIR WORK_DIR [NSAMPLES] [SEQLEN]
#
# MODEL_DIR: a Hugging Face checkpoint or a .gguf (e.g. the SmolLM2 directory bench/
# evidence_smollm2.sh converts). Defaults: 4 samples of 2048 tokens (the methods' own default
# sample counts take an hour and more on a 2-core machine; the ratio is what is compared).
set -euo pipefail
MODEL=$1 BUILD=$(cd "$2" && pwd) WORK=$3 N=${4:-4} S=${5:-2048}
mkdir -p "$WORK"
LQ=$BUILD/llmquant
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all}," \
    "$($LQ --version), $MODEL, $N x $S calibration tokens"
fwd=$("$BUILD/bench/bench_forward" --model "$MODEL" --tokens $((N * S)) --seqlen "$S" \
    --no-synthetic 2>&1 | sed -n 's/.*(layers \([0-9.]*\) s.*/\1/p' | tail -1)
[ -n "$fwd" ] || { echo "bench_forward gave no layer time" >&2; exit 1; }
echo
echo "one forward over the calibration tokens (layers): $fwd s"
echo
echo "| conversion | wall s | forward-pass equivalents | peak RSS MiB |"
echo "|---|---:|---:|---:|"
row() { # name method args...
    local name=$1 method=$2
    shift 2
    "$LQ" --json "$method" "$MODEL" -o "$WORK/out-$name" --force --nsamples "$N" --seqlen "$S" \
        "$@" >"$WORK/$name.json" 2>"$WORK/$name.log"
    python3 - "$WORK/$name.json" "$fwd" "$name" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
fwd = float(sys.argv[2])
print(f"| {sys.argv[3]} | {r['seconds']:.1f} | {r['seconds'] / fwd:.2f} | "
      f"{r['peak_rss_bytes'] / 2**20:.0f} |")
EOF
}
# group sizes: each method's default (128, or 64 / 32 where 128 does not divide the widths)
row "gptq w4" gptq
row "gptq w4 --no-stage-cache" gptq --no-stage-cache
row "gptq w4 --no-v-attn-weights" gptq --no-v-attn-weights
row "int8" int8
row "awq w4" awq
