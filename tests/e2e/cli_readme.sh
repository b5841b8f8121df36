#!/usr/bin/env bash
# README.md's exit-code table is `llmquant exit-codes` verbatim (generated from lq_status_name /
# lq_status_str), and every command the CLI offers is documented there.
set -e
. "$(dirname "$0")/cli_lib.bash"
R="${LQ_SRC:-}/README.md"
if [ ! -f "$R" ]; then
    echo "SKIP: README.md not found (LQ_SRC=${LQ_SRC:-unset})"
    exit 77
fi
run "$LQ_BIN" exit-codes
expect_rc 0 "exit-codes"
cp "$T/out" "$T/codes.md"
sed -n '/<!-- exit-codes:begin -->/,/<!-- exit-codes:end -->/p' "$R" | sed '1d;$d' >"$T/readme_codes.md"
CHECKS=$((CHECKS + 1))
if ! diff -u "$T/readme_codes.md" "$T/codes.md" >"$T/diff"; then
    fail "README exit-code table is stale; regenerate with: llmquant exit-codes"
    cat "$T/diff" >&2
fi
# the table has one row per status: codes are distinct and LQ_OK is 0
CHECKS=$((CHECKS + 1))
rows=$(grep -c '^| [0-9]' "$T/codes.md")
distinct=$(grep '^| [0-9]' "$T/codes.md" | cut -d'|' -f2 | sort -u | wc -l)
[ "$rows" -gt 40 ] && [ "$rows" = "$distinct" ] || fail "exit codes: $rows rows, $distinct distinct"
expect_in "$T/codes.md" '| 0 | `LQ_OK` | success |' "exit-codes"
run "$LQ_BIN" --json exit-codes
CHECKS=$((CHECKS + 1))
json_ok "$T/out" || fail "exit-codes --json is not JSON"
# every command in `llmquant --help` appears in the README's command summary
run "$LQ_BIN" --help
for c in $(sed -n 's/^  \([a-z0-9-]*\) .*/\1/p' "$T/out"); do
    expect_in "$R" "\`llmquant $c" "README documents $c"
done
finish
