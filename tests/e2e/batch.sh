#!/usr/bin/env bash
# llmquant batch: runs jobs in order, skips finished ones on re-run, shards without overlap,
# keeps going past a failing job (exit 111), rejects a malformed job file (exit 110), and a
# kill -9 mid-batch loses only the job in flight.
set -u
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
BIN=$LQ_BIN
T=$LQ_TMP
rm -rf "$T"; mkdir -p "$T"; cd "$T"
fail=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }
M=$S/models/stories260K
WIKI=$S/data/wikitext2/wiki.valid.tokens
[ -f "$WIKI" ] || WIKI=builtin # the built-in corpus holds WikiText-2 validation
TOK=$M/llama2c/tok512.bin
cat > jobs.jsonl <<J
# comment lines and blank lines are ignored

{"model": "$M", "method": "rtn", "out": "out/rtn-g32", "options": {"group-size": 32}}
{"model": "$M", "method": "nf4", "out": "out/nf4", "options": {"blocksize": 64}}
{"model": "$M", "method": "int8", "out": "out/int8", "options": {"tokenizer": "$TOK", "calib": "$S/data/tinystories/tinystories_sample.txt", "nsamples": 4, "seqlen": 128}}
{"model": "$M", "method": "rtn", "out": "out/rtn-pc", "options": {"group_size": -1, "sym": false}}
J
"$BIN" batch jobs.jsonl --json > r1.json 2> r1.err; rc=$?
check '[ $rc = 0 ]' "first run exit 0 (got $rc)"
check '[ -f out/rtn-g32/model.safetensors ] && [ -f out/nf4/model.safetensors ] && [ -f out/int8/model.safetensors ] && [ -f out/rtn-pc/model.safetensors ]' "all outputs written"
check 'grep -q "ok" r1.err' "summary table on stderr with --json"
python3 - r1.json <<'P' || fail=1
import json, sys
r = json.load(open(sys.argv[1]))
assert [j["state"] for j in r] == ["done"] * 4, r
assert all(j["peak_rss_bytes"] > 0 and j["seconds"] > 0 for j in r)
assert r[2]["report"]["method"] == "int8"
print("ok: json summary")
P
m1=$(stat -c %Y out/rtn-g32/model.safetensors)
"$BIN" batch jobs.jsonl --json > r2.json 2>/dev/null; rc=$?
check '[ $rc = 0 ]' "re-run exit 0"
states() { python3 -c 'import json,sys; print(" ".join(j["state"] for j in json.load(open(sys.argv[1]))))' "$1"; }
check '[ "$(states r2.json)" = "already_done already_done already_done already_done" ]' "re-run skips every finished job"
check '[ "$m1" = "$(stat -c %Y out/rtn-g32/model.safetensors)" ]' "finished output untouched"

# shards partition the jobs
rm -rf out
for i in 0 1 2; do "$BIN" batch jobs.jsonl --shard $i/3 --json > s$i.json 2>/dev/null; done
python3 - <<'P' || fail=1
import json
seen = sorted(j["job"] for i in range(3) for j in json.load(open(f"s{i}.json")))
assert seen == [0, 1, 2, 3], seen
print("ok: shards 0/3 1/3 2/3 cover each job exactly once")
P

# a failing job does not stop the others
cat > bad.jsonl <<J
{"model": "$M", "method": "rtn", "out": "outb/a", "options": {"group_size": 32}}
{"model": "/nonexistent/model", "method": "rtn", "out": "outb/b"}
{"model": "$M", "method": "nf4", "out": "outb/c"}
J
"$BIN" batch bad.jsonl --quiet; rc=$?
check '[ $rc = 111 ]' "failed job -> exit 111 (got $rc)"
check '[ -f outb/a/model.safetensors ] && [ -f outb/c/model.safetensors ] && [ ! -e outb/b ]' "other jobs still ran, failed one left nothing"

# malformed job files
echo '{"model": "x", "method": "rtn"}' > m1.jsonl
"$BIN" batch m1.jsonl --quiet 2>/dev/null; rc=$?
check '[ $rc = 110 ]' "missing out -> exit 110 (got $rc)"
echo '{"model": "x", "method": "rtn", "out": "o", "options": {"group_sise": 3}}' > m2.jsonl
"$BIN" batch m2.jsonl 2> m2.err; rc=$?
check '[ $rc = 110 ] && grep -q group_sise m2.err' "unknown option named -> exit 110 (got $rc)"
echo 'not json' > m3.jsonl
"$BIN" batch m3.jsonl --quiet 2>/dev/null; rc=$?
check '[ $rc = 110 ]' "not JSON -> exit 110"
"$BIN" batch jobs.jsonl --shard 3/3 --quiet 2>/dev/null; rc=$?
check '[ $rc = 2 ]' "bad --shard -> exit 2"

# kill -9 in the middle: finished outputs stay, the rest is redone, no temporaries remain
cat > slow.jsonl <<J
{"model": "$M", "method": "rtn", "out": "outk/a", "options": {"group_size": 32}}
{"model": "$M", "method": "int8", "out": "outk/b", "options": {"tokenizer": "$TOK", "calib": "$WIKI", "nsamples": 64, "seqlen": 512}}
{"model": "$M", "method": "nf4", "out": "outk/c"}
J
"$BIN" batch slow.jsonl --quiet & pid=$!
for _ in $(seq 100); do [ -f outk/a/model.safetensors ] && break; sleep 0.1; done
sleep 0.5
kill -9 $pid; wait $pid 2>/dev/null
# The job in flight dies with its parent (PR_SET_PDEATHSIG); wait until it has.
for t in outk/.*.lqtmp-*; do
    [ -e "$t" ] || continue
    cpid=${t##*-}
    for _ in $(seq 50); do
        st=$(awk '{print $3}' /proc/$cpid/stat 2>/dev/null)
        [ -z "$st" ] || [ "$st" = Z ] && break
        sleep 0.1
    done
done
check '[ -f outk/a/llmquant_report.json ] && [ ! -e outk/c ]' "kill -9: first job finished, last not started"
"$BIN" batch slow.jsonl --json > k.json 2>/dev/null; rc=$?
check '[ $rc = 0 ]' "resume exit 0"
check '[ "$(states k.json)" = "already_done done done" ]' "resume redoes only unfinished jobs"
check '[ -z "$(ls -A outk | grep lqtmp)" ]' "no temporary directories left after resume"
exit $fail
