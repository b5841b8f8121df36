#!/usr/bin/env bash
# llmquant's CPU dequant-matmul kernels against llama.cpp's closest types, side by side in one
# run on one machine (issue #13, item 1): every format of bench_kernels_cpu against ggml_mul_mat
# of the llama-cpp-python sdist's ggml (bench/llamacpp/ggml_mulmat.c, built here), same shapes,
# batch sizes and threads, best of repeats for both. Prints a markdown table of every point
# (ratio = llama.cpp time / llmquant time; > 1: llmquant faster), then the ratios pivoted per
# shape: a row per format and thread count, a column per m.
#
#   bench/kernels_vs_llamacpp.sh BUILD_DIR [WORK_DIR]
#   env: SHAPES="4096x4096 11008x4096 4096x11008" (n x k), MS=1,16,64,512, THREADS="1 2",
#        SECS=0.3 (seconds of repeats per point), ROUNDS=2 (whole passes; each point keeps its
#        best: a 2-core VM's neighbours slow down stretches of seconds, not single runs),
#        PAIRS="nf4_b64:q4_K ..." (a subset of the pairs below), FILTER=nf4 (only the
#        bench_kernels_cpu formats whose name holds it: much faster with a subset of PAIRS),
#        EVICT=96 (MiB read between timed runs on both sides, untimed: the weights then come
#        from memory, as in a model's forward, rather than from an L3 holding the one matrix),
#        RERUN=3 (points of the reduced-precision rows, RERUN_MATCH, below 1 are measured that
#        many times more, both sides alternated, each keeping its best: see below),
#        RERUN_ONLY=1 (only that pass, on WORK_DIR's rows.md of an earlier run),
#        PAIRED=1 (instead: each point in one process, llmquant's kernel and llama.cpp's
#        alternated call by call, ROUNDS processes a point, 3 by default: see below),
#        QX=1 (only the reduced-precision rows of the formats that have them, "+ix" "+bx"
#        "+hx", and no sgemm: the comparison of record in about half the time)
#
# Pairs (llama.cpp type: the closest of its own to each format): 4-bit formats (GPTQ-4,
# act-order included, AWQ, NF4 with and without double quant) vs q4_K, GPTQ-3 (as stored, and held
# as 4-bit codes by lq_qlinear_sort: gptq3_g128_sorted) vs q3_K, GPTQ-2 vs
# q2_K, GPTQ-8 and LLM.int8 vs q8_0, dense fp16 / bf16 weights vs f16 / bf16 (dense-f32: OpenBLAS
# sgemm on float32 weights, vs f16). llama.cpp's time includes quantizing the activations (Q8_K / Q8_0) on every
# call; llmquant's rows "<format>+ix" are its integer-activation kernels (LQ_QLINEAR_INT_X,
# int8 activations), "dense_bf16+bx" dense bf16 on bf16
# activations (LQ_QLINEAR_BF16_X, AVX-512 BF16, as llama.cpp's bf16), "dense_f16+hx" dense fp16
# on fp16 activations (LQ_QLINEAR_F16_X, as llama.cpp's f16), the others keep float activations.
set -euo pipefail
BUILD=$(realpath "$1")
WORK=${2:-${TMPDIR:-/tmp}/lq_kernels_vs_llamacpp}
SRC=$(cd "$(dirname "$0")/.." && pwd)
SHAPES=${SHAPES:-"4096x4096 11008x4096 4096x11008"}
MS=${MS:-1,16,64,512}
THREADS=${THREADS:-"1 2"}
SECS=${SECS:-0.3}
PAIRED=${PAIRED:-0}
ROUNDS=${ROUNDS:-$([ "$PAIRED" = 1 ] && echo 3 || echo 2)}
RERUN=${RERUN:-3}
RERUN_MATCH=${RERUN_MATCH:-'[+][ibh]x$|^int8_'}
RERUN_ONLY=${RERUN_ONLY:-0}
QX=${QX:-0}
qx=$([ "$QX" = 1 ] && echo -q || true)
LLAMA_HUGE=${LLAMA_HUGE:-1}
tunables=$([ "$LLAMA_HUGE" = 1 ] && echo GLIBC_TUNABLES=glibc.malloc.hugetlb=1 || true)
mkdir -p "$WORK"

bin=$("$SRC/bench/build_llamacpp.sh" ggml ggml-cpu | tail -1)
lsrc=$(cd "$bin/../.." && pwd)
cc -O2 -Wall -Wextra -I"$lsrc/ggml/include" "$SRC/bench/llamacpp/ggml_mulmat.c" \
    "$SRC/bench/llamacpp/ggml_pair.c" -o "$WORK/ggml_mulmat" -L"$bin" -lggml -lggml-base \
    -lggml-cpu -Wl,-rpath,"$bin"
ver=$(cd "$lsrc" && (git rev-parse --short HEAD 2>/dev/null || basename "$(dirname "$(dirname "$lsrc")")"))

PAIRS=${PAIRS:-"gptq4_g128:q4_K gptq4_g128_actorder:q4_K gptq4_g128_actorder_sorted:q4_K awq_g128:q4_K awq_g128_sorted:q4_K nf4_b64_dq:q4_K nf4_b64:q4_K
gptq3_g128:q3_K gptq3_g128_sorted:q3_K gptq2_g128:q2_K gptq8_g128:q8_0 int8_thr6_out32:q8_0 dense_f16:f16
dense_bf16:bf16 dense-f32:f16"}
types=$(tr ' ' '\n' <<<"$PAIRS" | cut -d: -f2 | sort -u)

if [ "$PAIRED" = 1 ]; then
    # bench_kernels_ggml (bench/CMakeLists.txt) in BUILD, against this llama.cpp tree
    cmake -S "$SRC" -B "$BUILD" -DLQ_BENCH_GGML="$lsrc" >/dev/null
    cmake --build "$BUILD" -j "${JOBS:-2}" --target bench_kernels_ggml >&2
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu ($(nproc) cores); llama.cpp: ggml of $(basename "$lsrc") ($ver); $(date -u +%F)"
thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)
echo "Transparent huge pages: $thp; llama.cpp $([ "$LLAMA_HUGE" = 1 ] && echo with || echo without) glibc.malloc.hugetlb=1"
echo "Between timed runs: ${EVICT:-0} MiB read on both sides (0: the matrix may stay in the L3)"
"$BUILD/bench/bench_kernels_cpu" -f none -s 64x64 -m 1 -r 0.01 2>&1 | grep -m1 'OpenBLAS kernels' || true
echo
# PAIRED=1: separate processes compare two draws of a 2-core VM's state (which stretch of time,
# where the pages landed: one process of either side may run 1.5x slower than the next); one
# process running both, alternated call by call after the same eviction read, compares them under
# the same one. Each of ROUNDS processes gives a ratio of medians (llama.cpp's median time /
# llmquant's); a point reports the median of those ratios (of an even count, the lower middle
# one), with the two medians of that round. The same process also times a plain read of a
# buffer of llmquant's weight bytes on as many threads (bench_kernels_cpu -g), taken in turn
# with both: each side's weight bytes / median time as a percentage of that read's bytes / median
# time (the bandwidth a weight stream can have there and then; 100: the kernel streams its
# weights as fast as a loop that only reads them).
# The dense-f32 row (OpenBLAS) is not paired.
if [ "$PAIRED" = 1 ]; then
    prow="$WORK/paired.txt"
    : >"$prow"
    echo "| n x k | threads | format | m | llmquant median ms | llama.cpp type | llama.cpp median ms | ratio of medians (rounds) | read median ms | llmquant / llama.cpp % of read |"
    echo "|---|---:|---|---:|---:|---|---:|---:|---:|---:|"
    for shape in $SHAPES; do
        for t in $THREADS; do
            for pair in $PAIRS; do
                fmt=${pair%%:*} ty=${pair#*:}
                [ "$fmt" = dense-f32 ] && continue
                for ((round = 0; round < ROUNDS; round++)); do
                    env $tunables "$BUILD/bench/bench_kernels_ggml" -f "=$fmt" -g "$ty" -s "$shape" \
                        -t "$t" -m "$MS" -r "$SECS" ${EVICT:+-e "$EVICT"} $qx 2>&1 |
                        awk -v t="$t" '$1 == "pair" { print $2, $3, $4, t, $5, $8, $9, $11, $12, $13 }' >>"$prow"
                done
            done
            # per (format row, m): the median round by ratio
            awk -v shape="$shape" -v t="$t" '$3 == shape && $4 == t {
                    key = $1 " " $2
                    if (!(key in n)) order[++nk] = key
                    i = ++n[key]; r[key, i] = $7 / $6; lq[key, i] = $6; gg[key, i] = $7; ty[key] = $5
                    rd[key, i] = $8; lb[key, i] = $9; gb[key, i] = $10
                }
                END {
                    for (j = 1; j <= nk; j++) {
                        key = order[j]; c = n[key]
                        for (a = 1; a <= c; a++) idx[a] = a
                        for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++)
                            if (r[key, idx[b]] < r[key, idx[a]]) { x = idx[a]; idx[a] = idx[b]; idx[b] = x }
                        md = idx[int((c + 1) / 2)]; all = ""
                        for (a = 1; a <= c; a++) all = all (a > 1 ? " " : "") sprintf("%.2f", r[key, idx[a]])
                        split(key, kk, " ")
                        # each side bytes / median time against the read: lb / rd
                        bw = lb[key, md] / rd[key, md]
                        printf "| %s | %d | %s | %d | %.3f | %s | %.3f | %.2f (%s) | %.3f | %.0f / %.0f |\n",
                               shape, t, kk[1], kk[2], lq[key, md], ty[key], gg[key, md], r[key, md], all,
                               rd[key, md], 100 * lb[key, md] / lq[key, md] / bw,
                               100 * gb[key, md] / gg[key, md] / bw
                    }
                }' "$prow"
        done
    done
    exit 0
fi

rows="$WORK/rows.md"
[ "$RERUN_ONLY" = 1 ] || : >"$rows"
hdr="| n x k | threads | format | m | llmquant ms | llama.cpp type | llama.cpp ms | ratio |
|---|---:|---|---:|---:|---|---:|---:|"
[ "$RERUN_ONLY" = 1 ] || echo "$hdr"
for shape in $SHAPES; do
    [ "$RERUN_ONLY" = 1 ] && break
    n=${shape%x*} k=${shape#*x}
    for t in $THREADS; do
        out="$WORK/lq_${shape}_t$t.txt" gg="$WORK/gg_${shape}_t$t.txt"
        : >"$out"
        : >"$gg"
        for ((round = 0; round < ROUNDS; round++)); do
            "$BUILD/bench/bench_kernels_cpu" -s "$shape" -t "$t" -m "$MS" -r "$SECS" \
                ${FILTER:+-f "$FILTER"} ${EVICT:+-e "$EVICT"} $qx >>"$out" 2>&1
            for ty in $types; do
                env $tunables OMP_NUM_THREADS=$t "$WORK/ggml_mulmat" "$ty" "$n" "$k" "$MS" "$t" \
                    "$SECS" ${EVICT:+"$EVICT"} >>"$gg"
            done
        done
        # bench_kernels_cpu rows: name m nxk time ... ("dense-f32 sgemm" is two words)
        sed 's/^dense-f32 sgemm/dense-f32/' "$out" |
            awk -v shape="$shape" -v t="$t" -v gg="$gg" -v pairs="$(tr '\n' ' ' <<<"$PAIRS")" '
            BEGIN {
                while ((getline line < gg) > 0) {
                    split(line, a, " ")
                    key = a[2] " " a[5]
                    if (!(key in ref) || a[7] + 0 < ref[key] + 0) ref[key] = a[7]
                }
                np = split(pairs, p, " ")
                for (i = 1; i <= np; i++) { split(p[i], q, ":"); ty[q[1]] = q[2] }
            }
            { base = $1; sub(/\+[ibh]x$/, "", base) }
            (base in ty) && $3 == shape {
                key = $1 " " $2
                if (!(key in best)) { order[++nk] = key; nm[key] = $1; mm[key] = $2; tb[key] = ty[base] }
                if (!(key in best) || $4 + 0 < best[key] + 0) best[key] = $4
            }
            END {
                for (i = 1; i <= nk; i++) {
                    key = order[i]; r = ref[tb[key] " " mm[key]]
                    printf "| %s | %d | %s | %d | %.3f | %s | %.3f | %.2f |\n", shape, t, nm[key],
                           mm[key], best[key], tb[key], r, (r > 0 && best[key] > 0) ? r / best[key] : 0
                }
            }' | tee -a "$rows"
    done
done

# On a 2-core VM the same binary runs some points, above all on 2 threads, up to 1.5x slower
# in one process or stretch than in the next (NF4 at 16 rows of 4096 x 4096 on 2 threads:
# 1.39-1.41 ms in five runs, 1.91-2.13 in others minutes later; llama.cpp 1.61-1.70 in
# between), so a point below 1 gets RERUN more runs of both sides, alternated, and keeps each
# side's best of all. The rows that run reduced-precision activations only (RERUN_MATCH): the
# float-activation rows are below 1 by their arithmetic, not by chance.
if [ "$RERUN" -gt 0 ]; then
    redo="$WORK/rows_rerun.md"
    : >"$redo"
    again=""
    while IFS= read -r line; do
        IFS='|' read -r _ shape t name m lt ty gt ratio _ <<<"$line"
        read -r shape t name m lt ty gt ratio <<<"$shape $t $name $m $lt $ty $gt $ratio"
        if [[ $name =~ $RERUN_MATCH ]] && awk -v r="$ratio" 'BEGIN { exit !(r < 1) }'; then
            n=${shape%x*} k=${shape#*x}
            for ((i = 0; i < RERUN; i++)); do
                v=$("$BUILD/bench/bench_kernels_cpu" -f "${name%+?x}" -s "$shape" -t "$t" -m "$m" \
                    -r "$SECS" ${EVICT:+-e "$EVICT"} 2>&1 |
                    awk -v f="$name" -v s="$shape" '$1 == f && $3 == s { print $4 }')
                g=$(env $tunables OMP_NUM_THREADS=$t "$WORK/ggml_mulmat" "$ty" "$n" "$k" "$m" "$t" \
                    "$SECS" ${EVICT:+"$EVICT"} | awk '$1 == "ggml" { print $7 }')
                lt=$(awk -v a="$lt" -v b="${v:-$lt}" 'BEGIN { print (b + 0 < a + 0) ? b : a }')
                gt=$(awk -v a="$gt" -v b="${g:-$gt}" 'BEGIN { print (b + 0 < a + 0) ? b : a }')
            done
            line=$(awk -v s="$shape" -v t="$t" -v f="$name" -v m="$m" -v a="$lt" -v y="$ty" \
                -v b="$gt" 'BEGIN { printf "| %s | %d | %s | %d | %.3f | %s | %.3f | %.2f |", s, t,
                                    f, m, a, y, b, (a > 0 ? b / a : 0) }')
            again="$again$line"$'\n'
        fi
        echo "$line" >>"$redo"
    done <"$rows"
    mv "$redo" "$rows"
    if [ -n "$again" ]; then
        echo
        echo "Points below 1 measured $RERUN more times, both sides alternated, best of all runs:"
        echo
        echo "$hdr"
        printf '%s' "$again"
    fi
fi

# the ratios per shape: format (llama.cpp type) x threads, one column per m
for shape in $SHAPES; do
    echo
    echo "Ratios at $shape (llama.cpp time / llmquant time; > 1: llmquant faster):"
    echo
    awk -F' *[|] *' -v shape="$shape" -v ms="$MS" '
        BEGIN { nm = split(ms, M, ",") }
        $2 == shape {
            key = $4 " (" $7 ") | " $3
            if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
            r[key, $5] = $9
        }
        END {
            printf "| format (llama.cpp type) | threads |"
            for (i = 1; i <= nm; i++) printf " m=%s |", M[i]
            printf "\n|---|---:|"
            for (i = 1; i <= nm; i++) printf "---:|"
            printf "\n"
            for (j = 1; j <= nk; j++) {
                printf "| %s |", order[j]
                for (i = 1; i <= nm; i++) printf " %s |", ((order[j], M[i]) in r) ? r[order[j], M[i]] : "-"
                printf "\n"
            }
        }' "$rows"
done
