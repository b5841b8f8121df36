#!/usr/bin/env bash
# Safe outputs through the CLI (all inside this test's own directory): --force replaces only a
# directory llmquant wrote or an empty one; a file, a FIFO, a symbolic link (pointing out of the
# way) or a foreign directory is refused with exit 12 and left untouched; two processes writing
# the same output: the second fails at once with exit 13 while the first finishes normally.
set -e
. "$(dirname "$0")/cli_lib.bash"
B="$LQ_BIN"
M="${LQ_SRC:-}/examples/stories260K"
[ -f "$M/model.safetensors" ] || { echo "SKIP: $M not found (LQ_SRC)"; exit 77; }
rm -rf "$T"
mkdir -p "$T/w" "$T/elsewhere"
W="$T/w"
echo precious >"$T/elsewhere/keep.txt"

echo data >"$W/file"
run "$B" nf4 "$M" -o "$W/file" --force
expect_error 12 "is a file" "--force over a file"
mkfifo "$W/fifo"
run "$B" nf4 "$M" -o "$W/fifo" --force
expect_error 12 "not a directory llmquant wrote" "--force over a FIFO"
ln -s "$T/elsewhere" "$W/link"
run "$B" nf4 "$M" -o "$W/link" --force
expect_error 12 "symbolic link" "--force over a symlink"
mkdir "$W/foreign" && echo x >"$W/foreign/weights.bin"
run "$B" convert "$M" -o "$W/foreign" --force
expect_error 12 "llmquant did not write" "convert --force over a foreign directory"
CHECKS=$((CHECKS + 1))
[ "$(cat "$W/file")" = data ] && [ -p "$W/fifo" ] && [ -L "$W/link" ] &&
    [ "$(cat "$T/elsewhere/keep.txt")" = precious ] && [ -f "$W/foreign/weights.bin" ] &&
    [ "$(ls "$T/elsewhere")" = keep.txt ] || fail "a refused target was modified"
mkdir "$W/empty"
run "$B" nf4 "$M" -o "$W/empty" --force -q
expect_rc 0 "--force over an empty directory"

# Two writers: the first holds the lock for its whole run (a GPTQ with enough calibration to
# take a few seconds), the second is refused immediately.
"$B" -q gptq "$M" -o "$W/race" --group-size 32 --nsamples 64 --seqlen 512 >"$T/first.out" \
    2>"$T/first.err" &
pid=$!
for _ in $(seq 200); do
    [ -e "$W/.race.lqlock" ] && break
    sleep 0.05
done
run "$B" nf4 "$M" -o "$W/race" --force
expect_error 13 "another llmquant process is writing this output" "second writer"
set +e
wait $pid
rc=$?
set -e
CHECKS=$((CHECKS + 1))
[ $rc = 0 ] && [ -f "$W/race/llmquant_report.json" ] && grep -q '"method":"gptq"' "$W/race/llmquant_report.json" ||
    fail "first writer: exit $rc, $(cat "$T/first.err")"
CHECKS=$((CHECKS + 1))
if ls -a "$W" | grep -q -e lqtmp -e lqlock; then fail "left behind: $(ls -a "$W")"; fi
finish
