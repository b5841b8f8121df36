#!/usr/bin/env bash
# Build the libFuzzer targets with clang (-DLQ_FUZZ=ON, library instrumented for coverage +
# ASan/UBSan) into build-fuzz/ and run each target for N seconds (default 60), one process per
# target, FUZZ_JOBS of them at once (default: the number of cores).
#   scripts/fuzz.sh [seconds-per-target] [target...]      (targets: tests/fuzz/fuzz_<target>.c)
# New inputs accumulate in build-fuzz/corpus/<target>/ (seeded from tests/fuzz/corpus/<target>/,
# which stays read-only); crashes land in tests/fuzz/artifacts/<target>-crash-*. Once a crash is
# fixed, copy the reproducer into tests/fuzz/corpus/<target>/ so ctest (fuzz_replay_<target>)
# replays it forever. Exit status: 1 if any target found a crash.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
secs=${1:-60}
shift || true
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DLQ_FUZZ=ON -DLQ_CUDA=OFF \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLQ_BUILD_BENCH=OFF >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t#fuzz_}"); done
fi
cmake --build build-fuzz -j2 --target $(printf 'fuzz_%s ' "${targets[@]}")
art="$root/tests/fuzz/artifacts"
mkdir -p "$art"
jobs_max=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
fuzz_one() { # target: runs it, then reports on its log (printed once all have run, in order)
  local t=$1 rc
  local dict=()
  [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
  mkdir -p "build-fuzz/corpus/$t"
  set +e
  ./build-fuzz/tests/fuzz/fuzz_"$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 "${dict[@]}" -artifact_prefix="$art/$t-" \
      "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"build-fuzz/fuzz_$t.log" 2>&1
  rc=$?
  set -e
  {
    echo "== fuzz_$t for ${secs}s"
    grep -E "^#[0-9]+.*DONE|ERROR|SUMMARY|stat::number_of_executed_units|stat::peak_rss|artifact" \
        "build-fuzz/fuzz_$t.log" || true
    if [ $rc -ne 0 ]; then
      echo "fuzz_$t: FAILED (rc $rc), log build-fuzz/fuzz_$t.log"
      # A UBSan report names neither ERROR nor DONE, and CI keeps only this output: show the
      # report and the reproducer itself, so a failure seen only there can be replayed here
      tail -n 40 "build-fuzz/fuzz_$t.log" | sed "s/^/fuzz_$t| /"
      for a in $(grep -o "Test unit written to [^ ]*" "build-fuzz/fuzz_$t.log" | cut -d' ' -f5); do
        if [ -f "$a" ] && [ "$(stat -c %s "$a")" -le 16384 ]; then
          echo "fuzz_$t| reproducer $(basename "$a") (base64, decode into tests/fuzz/corpus/$t/):"
          base64 -w 0 "$a" | sed "s/^/fuzz_$t| /"
          echo
        fi
      done
    fi
  } >"build-fuzz/fuzz_$t.report"
  echo $rc >"build-fuzz/fuzz_$t.rc" # read back after all ran: wait -n below reaps the jobs
}
for t in "${targets[@]}"; do
  rm -f "build-fuzz/fuzz_$t.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  cat "build-fuzz/fuzz_$t.report"
  [ "$(cat "build-fuzz/fuzz_$t.rc" 2>/dev/null)" = 0 ] || status=1
done
exit $status
