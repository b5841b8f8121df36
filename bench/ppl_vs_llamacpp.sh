#!/usr/bin/env bash
# Perplexity throughput against llama.cpp's llama-perplexity (issue #13, item 2), side by side on
# the same F16 GGUF, text, context, chunks and threads, llama.cpp's protocol on both sides; llmquant
# also with --f16-activations (LQ_QLINEAR_F16_X: activations rounded to fp16, as llama.cpp's F16
# matmul does).
# Prints tokens/s and perplexity of each and their ratio; llmquant runs the OpenBLAS kernels it
# picks for the CPU (named in the row).
#
#   bench/ppl_vs_llamacpp.sh MODEL_DIR BUILD_DIR WORK_DIR [TEXT] [CTX] [CHUNKS]
#
# MODEL_DIR: a Hugging Face checkpoint (float), written to F16 GGUF with llama.cpp's own
# convert_hf_to_gguf.py; llama-perplexity is built by bench/build_llamacpp.sh. Defaults: the
# WikiText-2 test file in the shared data, ctx 2048, 2 chunks, threads = nproc.
# QUANT=1 adds the 4-bit pair: llama.cpp's Q4_K_M of the same file (llama-quantize, no importance
# matrix) against `llmquant gptq` w4 (16 x 512 calibration windows of the built-in corpus; the
# throughput of its GPTQ kernel is what is compared, not the quality).
# BF16=1 adds the bf16 rows: llama.cpp on a BF16 GGUF of the model (its bf16 matmul rounds the
# activations to bf16) against llmquant on the same file, with float activations and with
# --bf16-activations (LQ_QLINEAR_BF16_X: the same rounding, vdpbf16ps where the CPU has it).
set -euo pipefail
MODEL=$1 BUILD=$(cd "$2" && pwd) WORK=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TEXT=${4:-${LQ_SHARED:-$ROOT/../shared}/data/wikitext2/wiki.test.raw}
CTX=${5:-2048} CHUNKS=${6:-2} T=${THREADS:-$(nproc)}
mkdir -p "$WORK"
BIN=$(bash "$ROOT/bench/build_llamacpp.sh" llama-perplexity | tail -1)
CONV=$(ls "$BIN"/../../convert_hf_to_gguf.py)
GG=$WORK/model-f16.gguf
[ -f "$GG" ] || python3 "$CONV" "$MODEL" --outtype f16 --outfile "$GG" >"$WORK/convert.log" 2>&1

llama_row() { # GGUF LABEL -> prints the row, sets LTPS
    "$BIN/llama-perplexity" -m "$1" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$T" -b "$CTX" \
        >"$WORK/llama.log" 2>&1
    # its own compute time: from "calculating" to the final estimate (tokenizing and loading
    # excluded, as llmquant's "seconds" excludes them); the log stamps are m.ss.mmm.uuu
    local ppl sec
    read -r ppl sec < <(python3 - "$WORK/llama.log" <<'PY'
import re, sys
t, ppl = [], "nan"
for line in open(sys.argv[1]):
    m = re.match(r"\s*(\d+)\.(\d+)\.(\d+)\.(\d+) I (perplexity: calculating|Final estimate)",
                 line)
    if m:
        t.append(int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 +
                 int(m.group(4)) / 1e6)
    f = re.search(r"Final estimate: PPL = ([0-9.]+)", line)
    if f:
        ppl = f.group(1)
print(ppl, f"{t[-1] - t[0]:.3f}" if len(t) >= 2 else "nan")
PY
    )
    LTPS=$(python3 -c "print(f'{$CTX * $CHUNKS / $sec:.1f}')")
    echo "| llama-perplexity, $2 | $ppl | $sec | $LTPS | 1.00 |"
}

llmquant_rows() { # MODEL LABEL [ppl options]: with the OpenBLAS kernels llmquant runs (its own
    # choice for this CPU, unless OPENBLAS_CORETYPE is set: see lq_blas_better_coretype)
    local core model=$1 label=$2
    shift 2
    core=$("$BUILD/llmquant" --version | sed -n 's/.*OpenBLAS kernels: \([A-Za-z0-9_]*\).*/\1/p')
    "$BUILD/llmquant" --json -q ppl "$model" --data "$TEXT" --protocol llamacpp --ctx "$CTX" \
        --chunks "$CHUNKS" --threads "$T" "$@" >"$WORK/lq.json" 2>"$WORK/lq.log" || {
        cat "$WORK/lq.log" >&2
        exit 1
    }
    python3 - "$WORK/lq.json" "$LTPS" "$core" "$label" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"| llmquant ppl, {sys.argv[4]} (OpenBLAS {sys.argv[3]}) | {j['ppl']:.4f} | "
      f"{j['seconds']:.3f} | {j['tokens_per_second']:.1f} | "
      f"{j['tokens_per_second'] / float(sys.argv[2]):.2f} |")
PY
}

echo "# $(date -u +%FT%TZ) $(uname -n), $T threads, ctx $CTX x $CHUNKS chunks," \
    "$(basename "$TEXT"), $("$BUILD/llmquant" --version)"
echo
echo "| run | ppl | seconds | tokens/s | vs llama.cpp |"
echo "|---|---:|---:|---:|---:|"
llama_row "$GG" "F16 GGUF"
llmquant_rows "$GG" "same GGUF"
llmquant_rows "$GG" "same GGUF, --f16-activations" --f16-activations
if [ "${BF16:-0}" = 1 ]; then
    GB=$WORK/model-bf16.gguf
    [ -f "$GB" ] || python3 "$CONV" "$MODEL" --outtype bf16 --outfile "$GB" \
        >"$WORK/convert-bf16.log" 2>&1
    llama_row "$GB" "BF16 GGUF"
    llmquant_rows "$GB" "same GGUF"
    llmquant_rows "$GB" "same GGUF, --bf16-activations" --bf16-activations
fi
[ "${QUANT:-0}" = 1 ] || exit 0
QB=$(bash "$ROOT/bench/build_llamacpp.sh" llama-quantize | tail -1)
[ -f "$WORK/model-q4km.gguf" ] || "$QB/llama-quantize" "$GG" "$WORK/model-q4km.gguf" Q4_K_M \
    >"$WORK/quantize.log" 2>&1
[ -d "$WORK/gptq" ] || "$BUILD/llmquant" -q gptq "$MODEL" -o "$WORK/gptq" --nsamples 16 \
    --seqlen 512 --threads "$T" >"$WORK/gptq.log" 2>&1
llama_row "$WORK/model-q4km.gguf" "Q4_K_M GGUF"
llmquant_rows "$WORK/gptq" "its GPTQ w4"
