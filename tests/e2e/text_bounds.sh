#!/usr/bin/env bash
# Calibration and evaluation text cost memory by what the job needs, not by what the file
# holds (inputs generated here; the zstd bombs are ~60 KB but inflate to 1 GB):
#   * a .jsonl.zst whose one line inflates to 1 GB: a clear error, not an allocation
#     (before: RSS grew with the line until "out of memory")
#   * a .txt.zst inflating to 1 GB as calibration text for 4 x 256 tokens: only the calibration
#     budget (4 MiB) is decoded, the report says the text was cut
#   * the same as `ppl` data, with --chunks 2 or not (a line over 64 MiB: an error; before:
#     8 GB RSS and "out of memory" after 32 s); 64 MB of text with `ppl --chunks 2`: a few MiB
#     read
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

# ppl streams its text (read, tokenized and scored a part at a time, parts cut after newlines
# where the tokenizer's ids do not change): its one line is over the 64 MiB a line may hold,
# with --chunks too (the first windows' ids are only known once the tokenizer may cut the text)
run "$LQ_BIN" -q ppl "$M" --data "$W/bomb.txt.zst" --chunks 2
expect_error 81 "bomb.txt.zst:1: a line of more than 64 MiB" "ppl --chunks 2 on a 1 GB one-line .txt.zst"
run "$LQ_BIN" -q ppl "$M" --data "$W/bomb.txt.zst"
expect_error 81 "bomb.txt.zst:1: a line of more than 64 MiB" "ppl on a 1 GB one-line .txt.zst"

# 64 MB of plain text: --chunks 2 reads a few MiB of it and stops
run "$LQ_BIN" --json ppl "$M" --data "$W/big.txt" --chunks 2 --ctx 256
expect_rc 0 "ppl --chunks 2 on 64 MB of text"
cp "$T/out" "$W/p.json"
CHECKS=$((CHECKS + 2))
[ "$(field "$W/p.json" text_truncated)" = True ] || fail "ppl --chunks 2: text_truncated not set"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['windows'] == 2 and j['text_bytes'] <= 16 << 20 else 1)" "$W/p.json" ||
    fail "ppl --chunks 2 on 64 MB: $(cat "$W/p.json")"
rss_below "$W/p.json" 400 "ppl --chunks 2 on 64 MB of text"

# parts of 64 KiB (--max-memory 4M) give the perplexity of one part: the tokenizer's cuts and
# the windows' batches across parts change nothing (gptq windows over WikiText-2, docs over
# TinyStories stories repeated past several parts)
S=${LQ_SHARED:-}
WT=$S/data/wikitext2/wikitext2_test_hf_join.txt
[ -f "$WT" ] || WT=$SRC/examples/data/tinystories_sample.txt
python3 - "$W/docs.txt" "$SRC/examples/data/tinystories_sample.txt" <<'EOF'
import sys
t = open(sys.argv[2]).read()
with open(sys.argv[1], "w") as f:
    while f.tell() < 300_000:
        f.write(t + "\n<|endoftext|>\n")
EOF
pplkey() { python3 -c "import json,sys; j=json.load(sys.stdin); print(repr(j['ppl']), j['tokens'], j['windows'])"; }
for args in "--data $WT --chunks 150" "--data $W/docs.txt --protocol docs"; do
    # shellcheck disable=SC2086
    a=$("$LQ_BIN" --json -q ppl "$M" $args | pplkey)
    # shellcheck disable=SC2086
    b=$("$LQ_BIN" --json -q ppl "$M" $args --max-memory 4M | pplkey)
    CHECKS=$((CHECKS + 1))
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "ppl $args: one part '$a', parts of 64 KiB '$b'"
    echo "ppl $args: $a (parts of 8 MiB and of 64 KiB)"
done

run "$LQ_BIN" --json gptq "$M" -o "$W/o3" --group-size 32 --tokenizer "$TOKBIN" \
    --calib "$W/big.txt" --nsamples 1 --seqlen 256
expect_rc 0 "64 MB of text, llama2.c tokenizer"
cp "$T/out" "$W/o3.json"
rss_below "$W/o3.json" 600 "64 MB of text, llama2.c tokenizer"
rm -f "$W"/*.zst "$W/big.txt"
finish
