#!/usr/bin/env bash
# Quality at equal bits per weight (issue #16): every llmquant method and setting next to
# llama.cpp's quantizations (and GPTQModel's GPTQ where it is installed), one table per model,
# all in one run on the same machine, the same texts and the same protocol.
#
#   bench/quality.sh MODEL BUILD_DIR WORK_DIR
#
# MODEL: a .gguf (converted by `llmquant convert` first) or a Hugging Face float checkpoint.
# Perplexity: llama.cpp's protocol on both sides (`llmquant ppl --protocol llamacpp`, BOS per
# chunk, second half scored; llama-perplexity on the GGUFs), ctx 512, the first $CHUNKS chunks
# (default 48) of two texts of different kinds: WikiText-2 test (wiki.test.raw) and C++ source
# (llama.cpp's src/llama-model.cpp from the pinned llama-cpp-python sdist bench/build_llamacpp.sh
# fetches), so that no choice is tuned to one text.
# Calibration: $NS windows x $SEQ tokens (default 32 x 512) of llmquant's built-in corpus for
# every calibrated method; llama.cpp's importance matrix is computed on the same text
# (llama-imatrix, $NS chunks of $SEQ); GPTQModel gets llmquant's very token windows. llama.cpp's
# tools read the texts with --no-escape: by default they turn "\n", "\\" ... into the characters,
# which changes the C++ source that llmquant reads as it is.
# Bits per weight: bytes of the decoder layers' linear tensors (codes, scales, zeros, g_idx,
# NF4 statistics; norms excluded) x 8 / their parameter count, from the written files. The
# embedding / lm_head stay 16-bit on both sides (llama-quantize --token-embedding-type f16
# --output-tensor-type f16), so the columns compare the quantized decoder linears alone.
# GPTQModel rows: GPTQMODEL_PY=/path/to/python with gptqmodel importable (CPU; its workers are set
# to nproc). The bitsandbytes row: python3 with transformers and bitsandbytes. Rows are resumable (WORK/reports); LQ_ONLY="name ..." restricts the runs.
set -euo pipefail
MODEL=$1 BUILD=$(cd "$2" && pwd) WORK=$3
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${LQ_SHARED:-$ROOT/../shared}
CHUNKS=${CHUNKS:-48} NS=${NS:-32} SEQ=${SEQ:-512} T=${THREADS:-$(nproc)}
mkdir -p "$WORK/reports"
WORK=$(cd "$WORK" && pwd)
cp "$BUILD/llmquant" "$WORK/llmquant" # a rebuild during the run does not change the rows
LQ=$WORK/llmquant
BIN=$(bash "$ROOT/bench/build_llamacpp.sh" llama-perplexity llama-quantize llama-imatrix | tail -1)
SRC=$(cd "$BIN/../.." && pwd)
WIKI=$SHARED/data/wikitext2/wiki.test.raw
CODE=$SRC/src/llama-model.cpp
cd "$WORK"
echo "# $(date -u +%FT%TZ) $(uname -n), $T threads, $($LQ --version), $(basename "$MODEL")," \
    "ctx 512 x $CHUNKS chunks, calibration $NS x $SEQ" | tee "$WORK/reports/run.txt"

BASE=$WORK/base
if [ ! -d "$BASE" ]; then
    case $MODEL in
    *.gguf) $LQ -q convert "$MODEL" -o "$BASE.tmp" ;;
    *) cp -r "$MODEL" "$BASE.tmp" ;;
    esac
    mv "$BASE.tmp" "$BASE"
fi
F16=$WORK/model-f16.gguf
[ -f "$F16" ] || python3 "$SRC/convert_hf_to_gguf.py" "$BASE" --outtype f16 --outfile "$F16" \
    >"$WORK/convert.log" 2>&1
CAL=$WORK/calib.txt
[ -f "$CAL" ] || zstd -dc "$ROOT/calib/data/builtin_calib.txt.zst" >"$CAL"

wanted() { [ -z "${LQ_ONLY:-}" ] || [[ " $LQ_ONLY " == *" $1 "* ]]; }

lq_ppl() { # model text -> ppl
    $LQ --json -q ppl "$1" --data "$2" --protocol llamacpp --ctx 512 --chunks "$CHUNKS" \
        --threads "$T" | python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])"
}
llama_ppl() { # gguf text -> ppl
    "$BIN/llama-perplexity" -m "$1" -f "$2" -c 512 -b 512 --chunks "$CHUNKS" -t "$T" --no-escape 2>&1 |
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'
}
report() { # name quantizer config seconds path: bpw and both perplexities -> reports/NAME.json
    local bpw
    bpw=$(python3 "$ROOT/bench/quality_bpw.py" "$BASE" "$5")
    if [[ $5 == *.gguf ]]; then
        a=$(llama_ppl "$5" "$WIKI") b=$(llama_ppl "$5" "$CODE")
    else
        a=$(lq_ppl "$5" "$WIKI") b=$(lq_ppl "$5" "$CODE")
    fi
    local bytes
    bytes=$(du -sbL "$5" | cut -f1)
    printf '{"name":"%s","quantizer":"%s","config":"%s","seconds":%s,"bpw":%s,"wiki":%s,"code":%s,"bytes":%s}\n' \
        "$1" "$2" "$3" "$4" "$bpw" "$a" "$b" "$bytes" >"reports/.$1.tmp"
    mv "reports/.$1.tmp" "reports/$1.json"
}
now() { date +%s.%N; }

lq_row() { # name config method args...
    local name=$1 cfg=$2 method=$3 t0
    shift 3
    wanted "$name" && [ ! -s "reports/$name.json" ] || return 0
    local cal=(--nsamples "$NS" --seqlen "$SEQ" --cache-dir "$WORK/cc")
    case $method in rtn | nf4) cal=() ;; esac
    rm -rf "out-$name"
    t0=$(now)
    $LQ -q "$method" "$BASE" -o "out-$name" --threads "$T" "${cal[@]}" "$@" \
        >"reports/$name.log" 2>&1 || {
        echo "$name: llmquant failed, see reports/$name.log" >&2
        return 0
    }
    report "$name" llmquant "$cfg" "$(python3 -c "print(round($(now) - $t0, 1))")" "out-$name"
}

llama_quant() { # name config type imatrix [llama-quantize options...]
    local name=$1 cfg=$2 type=$3 im=$4 t0 extra=()
    shift 4
    wanted "$name" && [ ! -s "reports/$name.json" ] || return 0
    t0=$(now)
    if [ -n "$im" ]; then
        [ -f imatrix.gguf ] || "$BIN/llama-imatrix" -m "$F16" -f "$CAL" -c "$SEQ" \
            --chunks "$NS" -t "$T" --no-escape -o imatrix.gguf >"reports/imatrix.log" 2>&1
        extra=(--imatrix imatrix.gguf)
    fi
    [ "$type" = F16 ] || "$BIN/llama-quantize" "${extra[@]}" "$@" "$F16" "model-$name.gguf" \
        "$type" >"reports/$name.log" 2>&1
    [ "$type" != F16 ] || ln -sf "$F16" "model-$name.gguf"
    report "$name" llama.cpp "$cfg" "$(python3 -c "print(round($(now) - $t0, 1))")" \
        "model-$name.gguf"
}
# the decoder linears alone: embeddings and output stay 16-bit, as llmquant's checkpoints keep them
llama_row() { # name config type [imatrix]
    llama_quant "$1" "$2" "$3" "${4:-}" --token-embedding-type f16 --output-tensor-type f16
}
# GGUF files as llama.cpp users get them: llama-quantize's mix with its own embedding / output
# types (with and without the importance matrix), and llmquant's --format gguf of the same mix
# (the same tensor types, so the same file size; gptq rounds the decoder linears on them)
llama_mix_row() { # name config type [imatrix]
    llama_quant "$1" "$2" "$3" "${4:-}"
}
lq_gguf_row() { # name config method type
    local name=$1 cfg=$2 method=$3 type=$4 t0 cal=()
    wanted "$name" && [ ! -s "reports/$name.json" ] || return 0
    [ "$method" = rtn ] || cal=(--nsamples "$NS" --seqlen "$SEQ" --cache-dir "$WORK/cc")
    rm -f "model-$name.gguf"
    t0=$(now)
    $LQ -q "$method" "$F16" -o "model-$name.gguf" --format "gguf:$type" --threads "$T" \
        "${cal[@]}" >"reports/$name.log" 2>&1 || {
        echo "$name: llmquant failed, see reports/$name.log" >&2
        return 0
    }
    report "$name" llmquant "$cfg" "$(python3 -c "print(round($(now) - $t0, 1))")" \
        "model-$name.gguf"
}

gm_row() { # name config key=value...  (GPTQModel's QuantizeConfig fields)
    local name=$1 cfg=$2 t0
    shift 2
    [ -n "${GPTQMODEL_PY:-}" ] && wanted "$name" && [ ! -s "reports/$name.json" ] || return 0
    local win
    win=$(ls "$WORK"/cc/*/windows.lqc 2>/dev/null | head -1)
    [ -n "$win" ] || { echo "$name: no llmquant calibration windows yet" >&2; return 0; }
    rm -rf "out-$name"
    t0=$(now)
    GPTQMODEL_CPU_WORKERS=$T "$GPTQMODEL_PY" "$ROOT/bench/quality_gptqmodel.py" "$BASE" "$win" \
        "out-$name" "$@" >"reports/$name.log" 2>&1 || {
        echo "$name: GPTQModel failed, see reports/$name.log" >&2
        return 0
    }
    report "$name" "GPTQModel $("$GPTQMODEL_PY" -c 'import gptqmodel; print(gptqmodel.__version__)' 2>/dev/null | tail -1)" \
        "$cfg" "$(python3 -c "print(round($(now) - $t0, 1))")" "out-$name"
}

bnb_row() { # name config: bitsandbytes' own NF4 (bench/quality_bnb.py), scored by llmquant ppl
    local name=$1 cfg=$2 t0 ver
    wanted "$name" && [ ! -s "reports/$name.json" ] || return 0
    ver=$(python3 -c 'import bitsandbytes; print(bitsandbytes.__version__)' 2>/dev/null | tail -1) ||
        return 0
    rm -rf "out-$name"
    t0=$(now)
    python3 "$ROOT/bench/quality_bnb.py" "$BASE" "out-$name" >"reports/$name.log" 2>&1 || {
        echo "$name: bitsandbytes failed, see reports/$name.log" >&2
        return 0
    }
    report "$name" "bitsandbytes $ver" "$cfg" "$(python3 -c "print(round($(now) - $t0, 1))")" \
        "out-$name"
}

# 16 bits and 8 bits
wanted fp16 && [ ! -s reports/fp16.json ] && report fp16 llmquant "float16 (the converted model)" 0 "$BASE"
llama_row llama-f16 "F16" F16
lq_row int8 "LLM.int8 (threshold 6)" int8
lq_row rtn-w8-g128 "w8 g128 sym, round to nearest" rtn --bits 8 --group-size 128
llama_row llama-q8_0 "Q8_0" Q8_0
# 4 bits
lq_row rtn-w4-g128 "w4 g128 sym, round to nearest" rtn --group-size 128
lq_row rtn-w4-g32-asym "w4 g32 asym, round to nearest" rtn --group-size 32 --no-sym
lq_row nf4 "NF4 blocks of 64, double quant (bitsandbytes' layout)" nf4
bnb_row bnb-nf4 "NF4 blocks of 64, double quant (transformers' BitsAndBytesConfig)"
lq_row gptq-w4-g128-act "GPTQ w4 g128 sym act-order" gptq --group-size 128 --desc-act
lq_row gptq-w4-g32-asym-act "GPTQ w4 g32 asym act-order" gptq --group-size 32 --no-sym --desc-act
lq_row awq-w4-g64 "AWQ w4 g64" awq --group-size 64 --awq-tokens 65536
lq_row awq-w4-g32 "AWQ w4 g32" awq --group-size 32 --awq-tokens 65536
lq_row gptq-awq-w4-g128-act "AWQ scales + GPTQ w4 g128 sym act-order" gptq --group-size 128 \
    --desc-act --awq-scales --awq-tokens 65536
lq_row gptq-awq-w4-g32-asym-act "AWQ scales + GPTQ w4 g32 asym act-order" gptq --group-size 32 \
    --no-sym --desc-act --awq-scales --awq-tokens 65536
lq_row gptq-w4-g128-act-mw "GPTQ w4 g128 sym act-order, weighted range search" gptq \
    --group-size 128 --desc-act --mse-weighted
lq_row gptq-w4-g64-asym-act-mw "GPTQ w4 g64 asym act-order, weighted range search" gptq \
    --group-size 64 --no-sym --desc-act --mse-weighted
lq_row gptq-w4-g32-asym-act-mw "GPTQ w4 g32 asym act-order, weighted range search" gptq \
    --group-size 32 --no-sym --desc-act --mse-weighted
# mixed precision (3/4/8 bits by measured sensitivity) at the sizes of llama.cpp's K-quant mixes
lq_row gptq-mixed-5.53-g32-asym-act-mw "GPTQ 3/4/8-bit mix at Q4_K_M's 5.534 bpw, g32 asym act-order, weighted range search" \
    gptq --target-bpw 5.534 --group-size 32 --no-sym --desc-act --mse-weighted
gm_row gptqmodel-w4-g128-act "GPTQ w4 g128 sym act-order" bits=4 group_size=128 desc_act=True
gm_row gptqmodel-w4-g32-asym-act "GPTQ w4 g32 asym act-order" bits=4 group_size=32 sym=False \
    desc_act=True
llama_row llama-q4_0 "Q4_0" Q4_0
llama_row llama-q4_k_m "Q4_K_M" Q4_K_M
llama_row llama-q4_k_m-imat "Q4_K_M + importance matrix" Q4_K_M imatrix
# 3 bits
lq_row gptq-w3-g32-asym-act "GPTQ w3 g32 asym act-order" gptq --bits 3 --group-size 32 --no-sym \
    --desc-act
lq_row gptq-w3-g32-asym-act-mw "GPTQ w3 g32 asym act-order, weighted range search" gptq --bits 3 \
    --group-size 32 --no-sym --desc-act --mse-weighted
lq_row gptq-awq-w3-g32-asym-act "AWQ scales + GPTQ w3 g32 asym act-order" gptq --bits 3 \
    --group-size 32 --no-sym --desc-act --awq-scales --awq-tokens 65536
gm_row gptqmodel-w3-g32-asym-act "GPTQ w3 g32 asym act-order" bits=3 group_size=32 sym=False \
    desc_act=True
lq_row gptq-mixed-4.63-g32-asym-act-mw "GPTQ 3/4/8-bit mix at Q3_K_M's 4.634 bpw, g32 asym act-order, weighted range search" \
    gptq --target-bpw 4.634 --group-size 32 --no-sym --desc-act --mse-weighted
lq_row gptq-mixed-4.54-g32-asym-act-mw "GPTQ 3/4/8-bit mix at Gemma-3's Q3_K_M size, 4.544 bpw, g32 asym act-order, weighted range search" \
    gptq --target-bpw 4.544 --group-size 32 --no-sym --desc-act --mse-weighted
# the same sizes with group sizes among the choices: 4-bit at g64 / g128 where g32 does not pay,
# instead of 3-bit linears; 8-bit at g128 where g32's scales cost more than they give
lq_row gptq-mixedg-4.63-asym-act-mw "GPTQ mix of 3, 4 g64/g32 and 8 bits at Q3_K_M's 4.634 bpw (\`--bpw-bits 3,4g64,4,8\`), asym act-order, weighted range search" \
    gptq --target-bpw 4.634 --bpw-bits 3,4g64,4,8 --group-size 32 --no-sym --desc-act \
    --mse-weighted
lq_row gptq-mixedg-4.54-asym-act-mw "GPTQ mix of 3, 4 g128/g64/g32 and 8 bits at Gemma-3's Q3_K_M size, 4.544 bpw (\`--bpw-bits 3,4g128,4g64,4,8\`), asym act-order, weighted range search" \
    gptq --target-bpw 4.544 --bpw-bits 3,4g128,4g64,4,8 --group-size 32 --no-sym --desc-act \
    --mse-weighted
lq_row gptq-mixedg-5.53-asym-act-mw "GPTQ mix of 3, 4 and 8 g64/g32 bits at Q4_K_M's 5.534 bpw (\`--bpw-bits 3,4,8g64,8\`), asym act-order, weighted range search" \
    gptq --target-bpw 5.534 --bpw-bits 3,4,8g64,8 --group-size 32 --no-sym --desc-act \
    --mse-weighted
lq_row gptq-mixedg4-4.63-asym-act-mw "GPTQ mix of 4 g64/g32 and 8 bits at Q3_K_M's 4.634 bpw (\`--bpw-bits 4g64,4,8\`), asym act-order, weighted range search" \
    gptq --target-bpw 4.634 --bpw-bits 4g64,4,8 --group-size 32 --no-sym --desc-act --mse-weighted
lq_row gptq-mixedg4-4.54-asym-act-mw "GPTQ mix of 4 g128/g64/g32 and 8 bits at Gemma-3's Q3_K_M size, 4.544 bpw (\`--bpw-bits 4g128,4g64,4,8\`), asym act-order, weighted range search" \
    gptq --target-bpw 4.544 --bpw-bits 4g128,4g64,4,8 --group-size 32 --no-sym --desc-act \
    --mse-weighted
# at Q3_K_S's size on Gemma-3-270M (4.125 bpw: its hidden 640 makes llama.cpp's 3-bit K-quants
# fall back to larger types)
lq_row gptq-mixed-4.13-g32-asym-act-mw "GPTQ 3/4/8-bit mix at 4.125 bpw, g32 asym act-order, weighted range search" \
    gptq --target-bpw 4.125 --group-size 32 --no-sym --desc-act --mse-weighted
llama_row llama-q3_k_m "Q3_K_M" Q3_K_M
llama_row llama-q3_k_m-imat "Q3_K_M + importance matrix" Q3_K_M imatrix
llama_row llama-q3_k_s "Q3_K_S" Q3_K_S
llama_row llama-q3_k_s-imat "Q3_K_S + importance matrix" Q3_K_S imatrix
llama_row llama-q2_k "Q2_K" Q2_K
llama_row llama-q2_k-imat "Q2_K + importance matrix" Q2_K imatrix

# GGUF mixes: llama-quantize (plain, + importance matrix) against llmquant gptq / awq --format gguf
for mix in Q4_K_M Q3_K_M Q2_K Q4_0; do
    m=$(echo "$mix" | tr 'A-Z' 'a-z')
    llama_mix_row "gguf-llama-$m" "GGUF $mix (llama-quantize)" "$mix"
    llama_mix_row "gguf-llama-$m-imat" "GGUF $mix + importance matrix (llama-quantize)" "$mix" imatrix
    lq_gguf_row "gguf-gptq-$m" "GGUF $mix, GPTQ on each tensor's type (--format gguf:$mix)" gptq "$mix"
    lq_gguf_row "gguf-awq-$m" "GGUF $mix, AWQ's scales, then each tensor's type (--format gguf:$mix)" awq "$mix"
done

echo
python3 "$ROOT/bench/quality_table.py" "$WORK/reports"
