#!/usr/bin/env bash
# Disk full (RLIMIT_FSIZE: writes fail with EFBIG, as on a full disk) and unwritable output
# locations: one error line, a distinct exit code, and no output or temporary directory left.
source "$(dirname "$0")/cli_lib.bash"
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
M=$S/models/stories260K
WIKI=$S/data/wikitext2/wiki.valid.tokens
[ -f "$WIKI" ] || WIKI=builtin # the built-in corpus holds WikiText-2 validation
TOK=$M/llama2c/tok512.bin
W=$T/disk
rm -rf "$W"
mkdir -p "$W"

nothing_left() { # DESCRIPTION
    CHECKS=$((CHECKS + 1))
    local left
    left=$(ls -A "$W")
    [ -z "$left" ] || fail "$1: left behind in the output's parent: $left"
}

# 200 KiB per file: the output (about 450 KiB) cannot be completed.
fsize_run() {
    set +e
    (trap '' XFSZ; ulimit -f 200; exec "$@") >"$T/out" 2>"$T/err"
    RC=$?
    set -e
}
fsize_run "$LQ_BIN" rtn "$M" -o "$W/rtn" --group-size 32 -q
expect_error 7 "File too large" "rtn on a full disk -> LQ_ERR_DISK_FULL"
nothing_left "rtn on a full disk"
fsize_run "$LQ_BIN" gptq "$M" -o "$W/gptq" --group-size 32 --tokenizer "$TOK" -q \
    --calib "$WIKI" --nsamples 8 --seqlen 128
expect_error 7 "File too large" "gptq on a full disk -> LQ_ERR_DISK_FULL"
nothing_left "gptq on a full disk"

run "$LQ_BIN" rtn "$M" -o "$W/no/such/parent/out" -q
expect_error 5 "does not exist" "missing parent directory -> LQ_ERR_NOT_FOUND"
nothing_left "missing parent directory"

if [ "$(id -u)" != 0 ]; then # root ignores directory permissions
    mkdir -p "$W/ro" && chmod 555 "$W/ro"
    run "$LQ_BIN" rtn "$M" -o "$W/ro/out" -q
    expect_error 8 "$W/ro" "read-only parent -> LQ_ERR_PERMISSION"
    CHECKS=$((CHECKS + 1))
    [ -z "$(ls -A "$W/ro")" ] || fail "read-only parent: something was created"
    chmod 755 "$W/ro" && rmdir "$W/ro"
else
    echo "note: running as root, the read-only directory case is skipped"
fi
finish
