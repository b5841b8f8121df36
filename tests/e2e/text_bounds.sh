#!/usr/bin/env bash
# Calibration and evaluation text cost memory by what the job needs, not by what the file
# holds (inputs generated here; the zstd bombs are ~60 KB but inflate to 1 GB):
#   * a .jsonl.zst whose one line inflates to 1 GB: a clear error, not an allocation
#     (before: RSS grew with the line until "out of memory")
#   * a .txt.zst inflating to 1 GB as calibration text for 4 x 256 tokens: only the calibration
#     budget (4 MiB) is decoded, the report says the text was cut
#   * the same as `ppl --chunks 2` data (4 MiB read), and as all of `ppl`'s data (a line over
#     64 MiB: an error; before: 8 GB RSS and "out of memory" after 32 s)
#   * 64 MB of plain text with llama2.c's tokenizer for 256 tokens (before: 4.06 GB RSS)
source "$(dirname "$0")/cli_lib.bash"
SRC=${LQ_SRC:?}
M=$SRC/examples/stories260K
TOKBIN=$M/llama2c/tok512.bin
command -v zstd >/dev/null 2>&1 || { echo "SKIP: the zstd program makes the inputs (apt-get install zstd)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 reads the reports"; exit 77; }
W=$T/text
rm -rf "$W"
mkdir -p "$W"
ASAN=0
grep -q __asan_init "$LQ_BIN" 2>/dev/null && ASAN=1

{ printf '{"text": "'; head -c 1000000000 /dev/zero | tr '\0' a; printf '"}\n'; } |
    zstd -q -1 -o "$W/line.jsonl.zst"
head -c 1000000000 /dev/zero | tr '\0' b | zstd -q -1 -o "$W/bomb.txt.zst"
python3 - "$W/big.txt" "$SRC/examples/data/tinystories_sample.txt" <<'EOF'
import sys
t = open(sys.argv[2]).read()
with open(sys.argv[1], "w") as f:
    while f.tell() < 64_000_000:
        f.write(t)
EOF

rss_below() { # REPORT MiB DESCRIPTION
    CHECKS=$((CHECKS + 1))
    [ "$ASAN" = 1 ] && return 0 # resident memory under ASan is the sanitizer's
    python3 - "$1" "$2" <<'EOF' || fail "$3: peak RSS over $2 MiB: $(cat "$1")"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["peak_rss_bytes"] < int(sys.argv[2]) * 2**20 else 1)
EOF
}

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

run "$LQ_BIN" -q gptq "$M" -o "$W/o1" --group-size 32 --calib "$W/line.jsonl.zst" --nsamples 4 \
    --seqlen 256
expect_error 81 "line.jsonl.zst:1: line longer than" "a 1 GB jsonl line"
CHECKS=$((CHECKS + 1))
[ ! -e "$W/o1" ] || fail "a 1 GB jsonl line: output written"

run "$LQ_BIN" --json gptq "$M" -o "$W/o2" --group-size 32 --calib "$W/bomb.txt.zst" --nsamples 4 \
    --seqlen 256
expect_rc 0 "1 GB .txt.zst as calibration text"
cp "$T/out" "$W/o2.json"
CHECKS=$((CHECKS + 2))
[ "$(field "$W/o2.json" calib_text_truncated)" = True ] || fail "bomb: calib_text_truncated not set"
[ "$(field "$W/o2.json" calib_text_bytes)" = 4194304 ] || fail "bomb: $(field "$W/o2.json" calib_text_bytes) bytes read, want 4 MiB"
rss_below "$W/o2.json" 900 "1 GB .txt.zst as calibration text"

run "$LQ_BIN" --json ppl "$M" --data "$W/bomb.txt.zst" --chunks 2
expect_rc 0 "ppl --chunks 2 on a 1 GB .txt.zst"
cp "$T/out" "$W/p.json"
CHECKS=$((CHECKS + 1))
[ "$(field "$W/p.json" text_truncated)" = True ] || fail "ppl bomb: text_truncated not set"
rss_below "$W/p.json" 900 "ppl --chunks 2 on a 1 GB .txt.zst"

# all of it: its one line is over the 64 MiB a line may hold
run "$LQ_BIN" -q ppl "$M" --data "$W/bomb.txt.zst"
expect_error 81 "bomb.txt.zst:1: a line of more than 64 MiB" "ppl on a 1 GB one-line .txt.zst"

run "$LQ_BIN" --json gptq "$M" -o "$W/o3" --group-size 32 --tokenizer "$TOKBIN" \
    --calib "$W/big.txt" --nsamples 1 --seqlen 256
expect_rc 0 "64 MB of text, llama2.c tokenizer"
cp "$T/out" "$W/o3.json"
rss_below "$W/o3.json" 600 "64 MB of text, llama2.c tokenizer"
rm -f "$W"/*.zst "$W/big.txt"
finish
