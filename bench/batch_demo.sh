#!/usr/bin/env bash
# Batch conversion demonstration on stories260K: a sweep of 8 jobs (methods x bit widths x
# group sizes) with a shared calibration cache, killed with SIGKILL in the middle, resumed, and
# sharded 2 ways. Prints the job file, the summary tables and what the resume redid.
# Usage: bench/batch_demo.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
work=${2:-/tmp/lq_batch_demo}
shared=${LQ_SHARED:-$here/../shared}
[ -d "$shared/models" ] || shared=$here/../../shared
shared=$(cd "$shared" && pwd)
bin=$build/llmquant
m=$shared/models/stories260K
tok=$m/llama2c/tok512.bin
cal=$shared/data/wikitext2/wiki.valid.tokens
ts=$shared/data/tinystories/tinystories_sample.txt
rm -rf "$work"
mkdir -p "$work"
cd "$work"
c='"tokenizer": "'$tok'", "calib": "'$cal'", "nsamples": 32, "seqlen": 512, "check_ppl": "'$ts'"'
cat > jobs.jsonl <<J
{"model": "$m", "method": "gptq", "out": "out/gptq-w4-g32-act", "options": {"bits": 4, "group_size": 32, "desc_act": true, $c}}
{"model": "$m", "method": "gptq", "out": "out/gptq-w3-g32-act", "options": {"bits": 3, "group_size": 32, "desc_act": true, $c}}
{"model": "$m", "method": "gptq", "out": "out/gptq-w4-pc", "options": {"bits": 4, "group_size": -1, $c}}
{"model": "$m", "method": "awq", "out": "out/awq-w4-g32", "options": {"group_size": 32, $c}}
{"model": "$m", "method": "awq", "out": "out/awq-w4-g64", "options": {"group_size": 64, $c}}
{"model": "$m", "method": "int8", "out": "out/int8", "options": {$c}}
{"model": "$m", "method": "rtn", "out": "out/rtn-w4-g32", "options": {"group_size": 32, "tokenizer": "$tok", "check_ppl": "$ts"}}
{"model": "$m", "method": "nf4", "out": "out/nf4-b64", "options": {"tokenizer": "$tok", "check_ppl": "$ts"}}
J
echo "== job file ($work/jobs.jsonl)"
cat jobs.jsonl
echo
echo "== run 1, killed with SIGKILL (batch and its job) while job 2 is in flight"
"$bin" batch jobs.jsonl > run1.out 2> run1.err &
pid=$!
for _ in $(seq 600); do [ -d out/gptq-w3-g32-act ] && break; sleep 0.2; done
sleep 2
pkill -9 -P $pid 2>/dev/null || true
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
echo "finished before the kill: $(ls out 2>/dev/null | grep -v '^\.' | tr '\n' ' ')"
echo "temporaries left by the killed job: $(ls -a out 2>/dev/null | grep '^\.' | grep -v '^\.\.\?$' | tr '\n' ' ')"
echo
echo "== run 2 (resume)"
"$bin" batch jobs.jsonl --json > run2.json 2> run2.err || true
cat run2.err
echo "temporaries after the resume: $(ls -a out | grep '^\.' | grep -v '^\.\.\?$' | tr '\n' ' ')"
echo
echo "== run 3 (everything done: nothing to redo)"
t0=$(date +%s.%N)
"$bin" batch jobs.jsonl 2>&1 | tail -3
echo "re-run took $(echo "$(date +%s.%N) - $t0" | bc) s"
echo
echo "== shards 0/2 and 1/2 into a fresh directory (what two array tasks would run)"
mkdir -p shard && sed "s#\"out/#\"$work/shard/#" jobs.jsonl > shard/jobs.jsonl
"$bin" batch shard/jobs.jsonl --shard 0/2 2>&1 | grep -E "^ *[0-9]+ " || true
"$bin" batch shard/jobs.jsonl --shard 1/2 2>&1 | grep -E "^ *[0-9]+ " || true
