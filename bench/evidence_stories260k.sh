#!/usr/bin/env bash
# Evidence table for the methods on stories260K (issue "four methods end to end"):
#   calibration: WikiText-2 validation (wiki.valid.tokens), 32 windows x 512 tokens, seed 0
#   evaluation:  TinyStories sample (in-domain) and, with WIKI=1, the WikiText-2 test join
#                (GPTQ/AWQ protocol: one stream, BOS once, windows of 512, mean NLL)
# Usage: bench/evidence_stories260k.sh [BUILD_DIR] [OUT_DIR]     (WIKI=1 adds WikiText-2)
# Prints a markdown table (also OUT_DIR/table.md). stories260K's MLP (intermediate 172) does
# not fit the GPTQ/AWQ packed layouts, so RTN/GPTQ/AWQ quantize the 20 attention linears and
# keep the 15 MLP linears in fp16 (reported by the tool); NF4 and INT8 quantize all 35.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
out=${2:-/tmp/lq_evidence}
shared=${LQ_SHARED:-$here/../shared}
[ -d "$shared/models" ] || shared=$here/../../shared
shared=$(cd "$shared" && pwd)
bin=$build/llmquant
model=$shared/models/stories260K
tok=$model/llama2c/tok512.bin
calib=$shared/data/wikitext2/wiki.valid.tokens
ts=$shared/data/tinystories/tinystories_sample.txt
wiki=$shared/data/wikitext2/wikitext2_test_hf_join.txt
mkdir -p "$out"

num() { # num KEY JSON -> first numeric value of "KEY"
    printf '%s' "$2" | grep -o "\"$1\":[-0-9.eE+]*" | head -1 | cut -d: -f2
}
ppl() { # ppl DIR FILE
    num ppl "$("$bin" ppl "$1" --data "$2" --tokenizer "$tok" --quiet --json)"
}

base_ts=$(ppl "$model" "$ts")
base_wiki=
[ "${WIKI:-0}" = 1 ] && base_wiki=$(ppl "$model" "$wiki")
rows=()
row() { # label method args...
    local label=$1 method=$2
    shift 2
    local dir=$out/$label rep cal=()
    case $method in gptq | awq | int8) cal=(--calib "$calib" --nsamples 32 --seqlen 512) ;; esac
    rep=$("$bin" "$method" "$model" -o "$dir" --force --quiet --json --tokenizer "$tok" \
        "${cal[@]}" "$@")
    local p w=
    p=$(ppl "$dir" "$ts")
    [ "${WIKI:-0}" = 1 ] && w=$(ppl "$dir" "$wiki")
    rows+=("$(awk -v l="$label" -v p="$p" -v b="$base_ts" -v w="$w" -v bw="$base_wiki" \
        -v s="$(num seconds "$rep")" -v r="$(num peak_rss_bytes "$rep")" \
        -v o="$(num output_bytes "$rep")" -v q="$(num quantized_linears "$rep")" 'BEGIN {
        wc = w == "" ? "-" : sprintf("%.3f (%+.2f%%)", w, 100 * (w / bw - 1))
        printf "| %s | %.4f (%+.2f%%) | %s | %d | %.2f | %.0f | %.0f |", l, p, 100 * (p / b - 1),
               wc, q, s, r / 1048576, o / 1024 }')")
    echo "${rows[-1]}" >&2
}

row rtn-w4-pc rtn --bits 4 --group-size -1
row rtn-w4-g64 rtn --bits 4 --group-size 64
row rtn-w4-g32 rtn --bits 4 --group-size 32
row gptq-w4-pc gptq --bits 4 --group-size -1
row gptq-w4-pc-act gptq --bits 4 --group-size -1 --desc-act
row gptq-w4-g64 gptq --bits 4 --group-size 64
row gptq-w4-g64-act gptq --bits 4 --group-size 64 --desc-act
row gptq-w4-g32 gptq --bits 4 --group-size 32
row gptq-w4-g32-act gptq --bits 4 --group-size 32 --desc-act
row awq-w4-g64 awq --bits 4 --group-size 64 --awq-tokens 65536
row awq-w4-g32 awq --bits 4 --group-size 32 --awq-tokens 65536
row rtn-w3-g32 rtn --bits 3 --group-size 32
row gptq-w3-g32-act gptq --bits 3 --group-size 32 --desc-act
row nf4-b64-dq nf4
row nf4-b64 nf4 --no-double-quant
row int8 int8

{
    echo "stories260K, $(date -u +%Y-%m-%d), $(nproc) CPU cores; calibration wiki.valid.tokens 32x512"
    echo
    echo "| config | ppl TinyStories (vs FP16) | ppl WikiText-2 test (vs FP16) | quantized linears | seconds | peak RSS MiB | output KiB |"
    echo "|---|---|---|---|---|---|---|"
    wc="-"
    [ -n "$base_wiki" ] && wc=$(printf '%.3f' "$base_wiki")
    printf '| fp16 | %.4f | %s | 0 | - | - | - |\n' "$base_ts" "$wc"
    printf '%s\n' "${rows[@]}"
} | tee "$out/table.md"
