#!/usr/bin/env bash
# Behaviour unchanged, shown: two llmquant binaries (say, main's and a refactor's) convert the
# same model with every method and the settings that take different code paths, into the same
# output path; the tensor files must be byte-identical and config.json equal as JSON values (its
# number spelling may differ), llmquant_report.json equal but for timings and memory, and a run
# the old binary refuses must be refused with the same message; `inspect --json` of each output
# must read the same from both. Prints "same"/"DIFF" per
# setting; exit 1 on any DIFF or failure.
#
#   bench/byte_identity.sh OLD_LLMQUANT NEW_LLMQUANT MODEL WORK_DIR [TOKENIZER]
#
# Build the old binary from a worktree: git worktree add /tmp/base main && cmake -S /tmp/base
# -B /tmp/base/b -DLQ_CUDA=OFF && cmake --build /tmp/base/b --target llmquant_cli. TOKENIZER:
# for a model directory without one (e.g. examples/stories260K/tokenizer.model for random test
# models whose vocabulary holds its ids). Calibration: 16 windows of 128 tokens of the shipped
# TinyStories text.
set -uo pipefail
OLD=$(realpath "$1") NEW=$(realpath "$2") MODEL=$(realpath "$3") WORK=$4
TOK=${5:+$(realpath "$5")}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$WORK"
cd "$WORK" || exit 1
CAL=(--calib "$SRC/examples/data/tinystories_sample.txt" --nsamples 16 --seqlen 128)
[ -n "$TOK" ] && CAL+=(--tokenizer "$TOK")
bad=0
run() { # tag method args...
    local tag=$1
    shift
    rm -rf out old_$tag new_$tag
    if ! "$OLD" -q "$@" -o out --force >old_$tag.log 2>&1; then # a refusal must stay the same
        "$NEW" -q "$@" -o out --force >new_$tag.log 2>&1
        if [ $? -ne 0 ] && cmp -s old_$tag.log new_$tag.log; then echo "same  $tag (both refuse)"
        else echo "FAIL  $tag (old binary: $(head -c 200 old_$tag.log))"; bad=1; fi
        return
    fi
    mv out old_$tag
    "$NEW" -q "$@" -o out --force >new_$tag.log 2>&1 || { echo "FAIL  $tag (new binary)"; bad=1; return; }
    mv out new_$tag
    local ok=1
    for f in old_$tag/*; do
        b=$(basename "$f")
        case $b in
        llmquant_report.json) # equal but for timings and memory
            python3 - "$f" "new_$tag/$b" <<'PY' || ok=0
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items()
                if not any(s in k for s in ("seconds", "rss", "per_second"))}
    return [strip(v) for v in x] if isinstance(x, list) else x
a, b = (strip(json.load(open(p))) for p in sys.argv[1:])
sys.exit(a != b)
PY
            ;;
        config.json)
            python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))" \
                "$f" "new_$tag/$b" || ok=0 ;;
        *) cmp -s "$f" "new_$tag/$b" || ok=0 ;;
        esac
    done
    [ "$(ls old_$tag | wc -l)" = "$(ls new_$tag | wc -l)" ] || ok=0
    # and both binaries describe the output alike (inspect reads every tensor and the config)
    cmp -s <("$OLD" inspect new_$tag --json 2>&1) <("$NEW" inspect new_$tag --json 2>&1) || ok=0
    if [ $ok = 1 ]; then echo "same  $tag"; else echo "DIFF  $tag"; bad=1; fi
}
run rtn rtn "$MODEL" --group-size 32
run nf4 nf4 "$MODEL"
run int8 int8 "$MODEL" "${CAL[@]}"
run gptq gptq "$MODEL" --group-size 32 "${CAL[@]}"
run gptq_act gptq "$MODEL" --group-size 32 --desc-act "${CAL[@]}"
run gptq_nts gptq "$MODEL" --group-size 32 --no-true-sequential "${CAL[@]}"
run gptq_nocache gptq "$MODEL" --group-size 32 --no-stage-cache "${CAL[@]}"
run gptq_awqs gptq "$MODEL" --group-size 32 --awq-scales "${CAL[@]}"
run gptq_w8 gptq "$MODEL" --bits 8 --group-size 32 --mse-weighted "${CAL[@]}"
run awq awq "$MODEL" --group-size 32 "${CAL[@]}"
run awq_noclip awq "$MODEL" --group-size 32 --no-awq-clip "${CAL[@]}"
# the group size the job picks itself, mixed precision, and the perplexity check
run awq_autog awq "$MODEL" "${CAL[@]}"
run gptq_bpw gptq "$MODEL" --group-size 32 --target-bpw 14 --bpw-tokens 512 "${CAL[@]}"
run int8_check int8 "$MODEL" "${CAL[@]}" --check-ppl "$SRC/examples/data/tinystories_sample.txt" \
    --chunks 4 --ctx 128
exit $bad
