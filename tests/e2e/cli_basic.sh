#!/usr/bin/env bash
# CLI surface: help generated from the options table, version, option parsing, one-line errors
# and distinct exit codes (the lq_status values).
set -e
. "$(dirname "$0")/cli_lib.bash"
B="$LQ_BIN"
M="${LQ_SHARED:-/nonexistent}/models/stories260K"

# --- help and version ------------------------------------------------------------------------
run "$B" --help
expect_rc 0 "--help"
for w in "usage: llmquant" rtn gptq awq nf4 int8 ppl inspect batch exit-codes; do
    expect_in "$T/out" "$w" "--help"
done
run "$B" help gptq
expect_rc 0 "help gptq"
expect_in "$T/out" "usage: llmquant gptq MODEL_DIR -o OUT_DIR" "help gptq"

run "$B" --version
expect_rc 0 "--version"
if [ -n "${LQ_SRC:-}" ]; then
    ver=$(sed -n 's/^#define LQ_VERSION_STRING "\(.*\)"/\1/p' "$LQ_SRC/include/llmquant.h")
    expect_in "$T/out" "llmquant $ver" "--version matches LQ_VERSION_STRING"
fi

# per-command help lists exactly the options whose `methods` name the command
run "$B" gptq --help
expect_rc 0 "gptq --help"
for w in "--group-size N" "--sym, --no-sym" "--desc-act, --no-desc-act" "--damp X" \
    "--calib FILE" "--max-memory SIZE" "--device auto|cpu|cuda" "[default: 128; -1..1073741824]" \
    "-o, --output OUT_DIR" "--awq-scales, --no-awq-scales" "--mse-weighted" "--target-bpw X" \
    "--bpw-bits VALUE" "--bpw-tokens N"; do
    expect_in "$T/out" "$w" "gptq --help"
done
for w in "--blocksize" "--threshold" "--awq-clip" "--batch N"; do
    expect_not_in "$T/out" "$w" "gptq --help"
done
run "$B" nf4 --help
expect_rc 0 "nf4 --help"
expect_in "$T/out" "--blocksize N" "nf4 --help"
expect_in "$T/out" "--double-quant, --no-double-quant" "nf4 --help"
expect_not_in "$T/out" "--group-size" "nf4 --help"
expect_not_in "$T/out" "--calib" "nf4 --help"
run "$B" int8 --help
expect_in "$T/out" "--threshold X" "int8 --help"
expect_in "$T/out" "--calib FILE" "int8 --help"
run "$B" inspect --help
expect_rc 0 "inspect --help"
for w in "--ctx N" "--batch N" "--tensors" "--group-size N"; do
    expect_in "$T/out" "$w" "inspect --help"
done
expect_not_in "$T/out" "--bits" "inspect --help"
run "$B" ppl --help
expect_in "$T/out" "--protocol gptq|llamacpp" "ppl --help"
expect_in "$T/out" "--data FILE" "ppl --help"
# --help wins over other problems on the line
run "$B" gptq --no-such-option --help
expect_rc 0 "--help with a bad option"

# --- parse errors: LQ_ERR_INVALID_ARG (2) ---------------------------------------------------
run "$B"
expect_rc 2 "no command"
expect_in "$T/err" "usage: llmquant" "no command"
run "$B" gtpq "$M" -o "$T/o"
expect_error 2 'unknown command "gtpq" (did you mean gptq?' "unknown command"
run "$B" rtn "$M" -o "$T/o" --group-sise 32
expect_error 2 "unknown option --group-sise for rtn (did you mean --group-size?" "unknown option"
run "$B" rtn "$M" -o "$T/o" --desc-act
expect_error 2 "option --desc-act does not apply to rtn (applies to: gptq)" "inapplicable option"
run "$B" nf4 "$M" -o "$T/o" --group-size=64
expect_error 2 "option --group-size does not apply to nf4" "inapplicable option"
run "$B" rtn "$M" -o "$T/o" --bits 9
expect_error 2 "option --bits: 9 is outside [2, 8]" "out of range"
run "$B" rtn "$M" -o "$T/o" --group-size=abc
expect_error 2 'option --group-size: "abc" is not an integer' "not an integer"
run "$B" rtn "$M" -o "$T/o" --sym=maybe
expect_error 2 "is not true/false" "bad bool"
run "$B" rtn "$M" -o "$T/o" --no-sym=true
expect_error 2 "option --no-sym takes no value" "--no-X with a value"
run "$B" rtn "$M" -o "$T/o" --device gpu
expect_error 2 "is not one of auto|cpu|cuda" "bad choice"
run "$B" gptq "$M" -o "$T/o" --max-memory 12X
expect_error 2 "is not a size" "bad size"
run "$B" rtn "$M" -o "$T/o" --group-size
expect_error 2 "option --group-size needs a value" "missing value"
run "$B" rtn "$M"
expect_error 2 "missing -o/--output OUT_DIR" "missing -o"
run "$B" rtn -o "$T/o"
expect_error 2 "missing argument" "missing MODEL_DIR"
run "$B" rtn "$M" extra -o "$T/o"
expect_error 2 'unexpected argument "extra"' "extra argument"
run "$B" --frobnicate rtn
expect_error 2 "unknown option --frobnicate before the command" "unknown global"
run "$B" ppl "$M"
expect_error 2 "missing --data FILE" "ppl without --data"
run "$B" ppl "$M" --data x --bits 4
expect_error 2 "option --bits does not apply to ppl" "ppl with --bits"

# --- library validation: each failure its own exit code -------------------------------------
run "$B" rtn "$T/no-such-model" -o "$T/o"
expect_error 5 "$T/no-such-model" "missing model dir -> LQ_ERR_NOT_FOUND"
mkdir -p "$T/not-a-model"
run "$B" gptq "$T/not-a-model" -o "$T/o"
expect_error 5 "no config.json" "dir without config.json -> LQ_ERR_NOT_FOUND"
mkdir -p "$T/badcfg"
echo '{"model_type": "gpt2"}' >"$T/badcfg/config.json"
run "$B" awq "$T/badcfg" -o "$T/o"
expect_error 43 '"gpt2" is not supported' "unsupported arch -> LQ_ERR_UNSUPPORTED_ARCH"
echo '{"model_type": ' >"$T/badcfg/config.json"
run "$B" awq "$T/badcfg" -o "$T/o"
expect_error 40 "config.json" "broken config.json -> LQ_ERR_JSON"
if [ -d "$M" ]; then
    mkdir -p "$T/exists"
    run "$B" rtn "$M" -o "$T/exists"
    expect_error 6 "$T/exists: already exists" "existing output -> LQ_ERR_EXISTS"
    run "$B" rtn "$M" -o "$M/sub" --force
    expect_error 2 "overlaps the model directory" "output inside the model"
    # with --force the existing output is no obstacle (the pipeline decides what comes next)
    run "$B" -q rtn "$M" -o "$T/exists" --force --group-size 32
    CHECKS=$((CHECKS + 1))
    if [ "$RC" = 6 ] || [ "$RC" = 2 ]; then fail "--force: exit code $RC"; fi
fi
run "$B" bench
expect_error 2 "bench" "bench is not a command (benchmarks are the bench/ programs)"
run "$B" batch "$T/no-such-jobs.jsonl"
expect_error 5 "no-such-jobs.jsonl" "batch with a missing job file -> LQ_ERR_NOT_FOUND"

# --- --json: errors as a JSON object on stdout, still one line on stderr ---------------------
run "$B" --json rtn "$T/no-such-model" -o "$T/o"
expect_rc 5 "--json error"
CHECKS=$((CHECKS + 1))
json_ok "$T/out" || fail "--json error output is not JSON: $(cat "$T/out")"
expect_in "$T/out" '"status_name":"LQ_ERR_NOT_FOUND"' "--json error"
expect_in "$T/err" "llmquant: error: " "--json error"
finish
