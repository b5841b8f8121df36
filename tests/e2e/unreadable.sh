#!/usr/bin/env bash
# Unreadable is not missing, and a model truncated under a running job is an I/O error:
#  * a model directory, config.json, safetensors file or .gguf file the user cannot read ->
#    "permission denied", LQ_ERR_PERMISSION (8), not "no config.json";
#  * a model file truncated while a run has it mapped (SIGBUS) -> one error line, LQ_ERR_IO (4),
#    no temporary directory or lock left next to the output.
# As root (who reads everything) the permission cases run as nobody through setpriv.
source "$(dirname "$0")/cli_lib.bash"
SRC=${LQ_SRC:?}
DEMO=$SRC/examples/stories260K
W=$T/unreadable
rm -rf "$W"
mkdir -p "$W"
chmod 755 "$T" "$W"

AS=()
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv >/dev/null 2>&1; then
        AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        AS=(SKIP)
    fi
fi

if [ "${AS[0]:-}" = SKIP ]; then
    echo "SKIP part: running as root without setpriv: permission cases not run"
elif ! "${AS[@]}" "$LQ_BIN" --version >/dev/null 2>&1; then
    echo "SKIP part: $LQ_BIN cannot run as an unprivileged user here (permission cases not run)"
else
    mk() { rm -rf "$W/$1" && cp -r "$DEMO" "$W/$1" && chmod -R a+rX "$W/$1"; }
    mk dir
    chmod 000 "$W/dir"
    run "${AS[@]}" "$LQ_BIN" inspect "$W/dir"
    expect_error 8 "permission denied" "unreadable model directory"
    chmod 755 "$W/dir"

    mk cfg
    chmod 000 "$W/cfg/config.json"
    run "${AS[@]}" "$LQ_BIN" inspect "$W/cfg"
    expect_error 8 "config.json: Permission denied" "unreadable config.json"

    mk st
    chmod 000 "$W/st/model.safetensors"
    run "${AS[@]}" "$LQ_BIN" rtn "$W/st" -o "$W/st-out" --group-size 32
    expect_error 8 "model.safetensors" "unreadable model.safetensors"
    CHECKS=$((CHECKS + 1))
    [ ! -e "$W/st-out" ] || fail "unreadable model.safetensors: output written"

    mkdir -p "$W/hidden/inner"
    cp -r "$DEMO" "$W/hidden/inner/m"
    chmod -R a+rX "$W/hidden"
    chmod 700 "$W/hidden"
    run "${AS[@]}" "$LQ_BIN" inspect "$W/hidden/inner/m"
    expect_error 8 "permission denied" "model below an unsearchable directory"
    chmod 755 "$W/hidden"

    printf 'GGUF\3\0\0\0' >"$W/m.gguf"
    chmod 000 "$W/m.gguf"
    run "${AS[@]}" "$LQ_BIN" inspect "$W/m.gguf"
    expect_error 8 "permission denied" "unreadable .gguf"
fi

# SIGBUS: truncate the checkpoint once the run is past layer 1 (it maps the file and drops each
# layer's pages after use, so later layers fault on the truncated pages).
if grep -q __asan_init "$LQ_BIN" 2>/dev/null; then
    echo "SKIP part: SIGBUS case (AddressSanitizer owns SIGBUS)"
else
    rm -rf "$W/bus" "$W/bus-out"
    cp -r "$DEMO" "$W/bus"
    set +e
    "$LQ_BIN" gptq "$W/bus" -o "$W/bus-out" --group-size 32 >"$T/out" 2>"$T/err.all" &
    pid=$!
    for _ in $(seq 1 600); do
        grep -q "layer 1/5" "$T/err.all" 2>/dev/null && break
        sleep 0.05
    done
    truncate -s 4096 "$W/bus/model.safetensors"
    wait $pid
    RC=$?
    set -e
    grep -v -e '^llmquant: warning:' -e '^llmquant: layer ' -e '^llmquant: calibrate ' \
        "$T/err.all" >"$T/err" || true
    expect_error 4 "truncated or became unreadable during the run (SIGBUS)" \
        "model truncated while mapped"
    CHECKS=$((CHECKS + 1))
    left=$(ls -A "$W" | grep -E '^\.bus-out\.' || true)
    [ -z "$left" ] && [ ! -e "$W/bus-out" ] || fail "SIGBUS: left behind: $left $(ls "$W")"
fi
finish
