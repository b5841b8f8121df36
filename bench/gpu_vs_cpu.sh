#!/usr/bin/env bash
# The GPU against the CPU of the same machine, side by side in one run: perplexity (every linear
# on the CUDA kernels vs the CPU ones) of a 7B-shaped synthetic stack and of its GPTQ output, and
# the GPTQ conversion itself; then a second GPU conversion, which must write the same bytes.
#
#   bench/gpu_vs_cpu.sh BUILD_DIR WORK_DIR [LAYERS=4]
#
# BUILD_DIR: a CUDA build (llmquant, bench/bench_synth_model). Text: $LQ_SHARED (default
# ../shared) data/wikitext2 (wiki.test.raw for ppl, wiki.valid.tokens for calibration), tokenizer
# stories260K's tok512.bin (the synthetic model's 512-token vocabulary). Prints one line per job
# (tokens/s or seconds) and the ratio; the JSON reports stay in WORK_DIR.
set -euo pipefail
B=$(cd "$1" && pwd)
mkdir -p "$2"
W=$(cd "$2" && pwd)
L=${3:-4}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=${LQ_SHARED:-$ROOT/../shared}
LQ=$B/llmquant
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)," \
    "$(nproc) CPU threads, $($LQ --version | head -1)"
M=$W/l7b-$L
if [ ! -f "$M/config.json" ]; then
    mkdir -p "$M"
    "$B/bench/bench_synth_model" "$M" --hidden 4096 --intermediate 11008 --layers "$L" --heads 32 \
        --kv-heads 32 --tokenizer "$S/models/stories260K/llama2c/tok512.bin" >/dev/null
fi
P=(--data "$S/data/wikitext2/wiki.test.raw" --ctx 512 --chunks 16 --json --quiet)
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
ppl_pair() { # model name
    for dev in cpu cuda; do
        "$LQ" ppl "$1" "${P[@]}" --device $dev >"$W/ppl_$2_$dev.json"
    done
    local c g
    c=$(field "$W/ppl_$2_cpu.json" tokens_per_second)
    g=$(field "$W/ppl_$2_cuda.json" tokens_per_second)
    printf 'ppl %-6s cpu %8.1f tokens/s (ppl %s)  cuda %8.1f tokens/s (ppl %s)  %.2fx\n' "$2" "$c" \
        "$(field "$W/ppl_$2_cpu.json" ppl)" "$g" "$(field "$W/ppl_$2_cuda.json" ppl)" \
        "$(python3 -c "print($g / $c)")"
}
ppl_pair "$M" dense
for run in cuda cpu cuda2; do
    "$LQ" gptq "$M" -o "$W/gptq_$run" --force --device "${run%2}" --nsamples 8 --seqlen 512 \
        --calib "$S/data/wikitext2/wiki.valid.tokens" --json --quiet >"$W/gptq_$run.json"
done
c=$(field "$W/gptq_cpu.json" seconds)
g=$(field "$W/gptq_cuda.json" seconds)
printf 'gptq   cpu %8.1f s  cuda %8.1f s (%s bytes on the GPU)  %.2fx\n' "$c" "$g" \
    "$(field "$W/gptq_cuda.json" gpu_peak_bytes)" "$(python3 -c "print($c / $g)")"
cmp -s "$W/gptq_cuda/model.safetensors" "$W/gptq_cuda2/model.safetensors" &&
    echo "two GPU conversions: the same bytes" || { echo "two GPU conversions DIFFER"; exit 1; }
ppl_pair "$W/gptq_cuda" gptq
