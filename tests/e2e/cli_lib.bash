# Helpers for tests/e2e/cli_*.sh (sourced; not a test itself: only *.sh files are registered).
set -u
if [ -z "${LQ_BIN:-}" ] || [ ! -x "${LQ_BIN}" ]; then
    echo "SKIP: LQ_BIN not set or not executable"
    exit 77
fi
T="${LQ_TMP:-/tmp/llmquant-e2e}"
mkdir -p "$T"
FAILS=0
CHECKS=0

fail() {
    echo "FAIL: $*" >&2
    FAILS=$((FAILS + 1))
}

# run CMD...: runs with stdout -> $T/out, stderr -> $T/err; sets RC.
run() {
    set +e
    "$@" >"$T/out" 2>"$T/err"
    RC=$?
    set -e
}

# expect RC_WANT DESCRIPTION
expect_rc() {
    CHECKS=$((CHECKS + 1))
    if [ "$RC" != "$1" ]; then
        fail "$2: exit code $RC, want $1; stderr: $(head -c 400 "$T/err")"
    fi
}

# expect_error RC_WANT NEEDLE DESCRIPTION: exit code, exactly one stderr line
# "llmquant: error: ..." containing NEEDLE, nothing on stdout.
expect_error() {
    expect_rc "$1" "$3"
    CHECKS=$((CHECKS + 1))
    local lines
    lines=$(wc -l <"$T/err")
    if [ "$lines" != 1 ] || ! grep -q '^llmquant: error: ' "$T/err"; then
        fail "$3: stderr is not one 'llmquant: error:' line: $(cat "$T/err")"
    fi
    if ! grep -qF -- "$2" "$T/err"; then
        fail "$3: '$2' not in: $(cat "$T/err")"
    fi
    if [ -s "$T/out" ]; then
        fail "$3: unexpected stdout: $(head -c 200 "$T/out")"
    fi
}

# expect_in FILE NEEDLE DESCRIPTION
expect_in() {
    CHECKS=$((CHECKS + 1))
    grep -qF -- "$2" "$1" || fail "$3: '$2' not found in $(basename "$1")"
}

expect_not_in() {
    CHECKS=$((CHECKS + 1))
    if grep -qF -- "$2" "$1"; then fail "$3: '$2' unexpectedly in $(basename "$1")"; fi
}

# JSON validity with python3 -m json.tool, else jq; returns 2 when neither exists.
json_ok() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -m json.tool "$1" >/dev/null 2>&1
    elif command -v jq >/dev/null 2>&1; then
        jq . "$1" >/dev/null 2>&1
    else
        return 2
    fi
}

finish() {
    if [ "$FAILS" -gt 0 ]; then
        echo "$(basename "$0"): $FAILS of $CHECKS checks FAILED" >&2
        exit 1
    fi
    echo "$(basename "$0"): all $CHECKS checks passed"
    exit 0
}
