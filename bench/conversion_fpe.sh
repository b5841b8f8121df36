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
# DEFAULTS=1 adds AWQ and INT8 at their own default calibration (128 x 512 tokens; AWQ's scale
# search scores the candidates on the first --awq-tokens 4096 of them), against a forward over
# those tokens;
# GPTQ_DEFAULTS=1 GPTQ at its own (128 x 2048; the forward once, not best of REPS=3).
# SMALL=0 leaves out the rows at NSAMPLES x SEQLEN (only the default-calibration ones).
set -euo pipefail
MODEL=$1 BUILD=$(cd "$2" && pwd) WORK=$3 N=${4:-4} S=${5:-2048}
mkdir -p "$WORK"
LQ=$BUILD/llmquant
echo "# $(date -u +%FT%TZ) $(uname -n), $(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-all}," \
    "$($LQ --version), $MODEL"
fwd_of() { # nsamples seqlen: seconds of one forward of the layers over nsamples x seqlen tokens
    local f
    f=$("$BUILD/bench/bench_forward" --model "$MODEL" --tokens $(($1 * $2)) --seqlen "$2" \
        --reps "${REPS:-3}" --no-synthetic 2>&1 | sed -n 's/.*(layers \([0-9.]*\) s.*/\1/p' | tail -1)
    [ -n "$f" ] || { echo "bench_forward gave no layer time" >&2; exit 1; }
    echo "$f"
}
echo "| conversion | calibration | wall s | forward-pass equivalents | peak RSS MiB |"
echo "|---|---|---:|---:|---:|"
row() { # name n s fwd method args...
    local name=$1 n=$2 s=$3 f=$4 method=$5
    shift 5
    "$LQ" --json "$method" "$MODEL" -o "$WORK/out-${name// /_}" --force --nsamples "$n" \
        --seqlen "$s" "$@" >"$WORK/${name// /_}.json" 2>"$WORK/${name// /_}.log"
    python3 - "$WORK/${name// /_}.json" "$f" "$name" "$n x $s" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fwd = float(sys.argv[2])
print(f"| {sys.argv[3]} | {sys.argv[4]} | {r['seconds']:.1f} | {r['seconds'] / fwd:.2f} | "
      f"{r['peak_rss_bytes'] / 2**20:.0f} |")
PY
}
# group sizes: each method's default (128, or 64 / 32 where 128 does not divide the widths)
if [ "${SMALL:-1}" != 0 ]; then
    fwd=$(fwd_of "$N" "$S")
    echo
    echo "one forward over the $N x $S calibration tokens (layers): $fwd s"
    echo
    row "gptq w4" "$N" "$S" "$fwd" gptq
    row "gptq w4 --no-stage-cache" "$N" "$S" "$fwd" gptq --no-stage-cache
    row "gptq w4 --no-v-attn-weights" "$N" "$S" "$fwd" gptq --no-v-attn-weights
    row "int8" "$N" "$S" "$fwd" int8
    row "awq w4 --awq-tokens $((N * S)) (full search)" "$N" "$S" "$fwd" awq --awq-tokens $((N * S))
fi
if [ "${GPTQ_DEFAULTS:-0}" = 1 ]; then # GPTQ at its own default calibration: ~15 min here
    fwd3=$(REPS=1 fwd_of 128 2048)
    echo
    echo "one forward over 128 x 2048 tokens (layers): $fwd3 s"
    echo
    row "gptq w4 (defaults)" 128 2048 "$fwd3" gptq
fi
if [ "${DEFAULTS:-0}" = 1 ]; then
    fwd2=$(fwd_of 128 512)
    echo
    echo "one forward over 128 x 512 tokens (layers): $fwd2 s"
    echo
    row "awq w4 (defaults)" 128 512 "$fwd2" awq
    row "int8 (defaults)" 128 512 "$fwd2" int8
fi
