#!/usr/bin/env bash
# The device check: everything a lent GPU should show, in priority order, each step under a
# timeout capped by the time left of BUDGET_S, results under OUT.
#
#   scripts/device_check.sh [--dry-run] BUDGET_S [OUT]
#
# Steps: the op test and the forward on the cuda backend (both precisions), stories260K converted
# by every method on the GPU and on the CPU with the perplexity of each output, a 7B-shaped
# stack (Llama-2-7B widths, LAYERS layers written by bench_synth_model) converted by GPTQ at the
# default calibration with its phases and peak device memory, the kernel test and the GPU
# pipeline test, compute-sanitizer memcheck over the op test, then the other methods on the 7B
# stack. --dry-run runs the same steps on the CPU here (cpu / guard backends, a small synthetic
# stack, --device cpu) so that the script cannot rot between device runs (ctest device_check_dry).
#
# Binaries: from LQ_BUILD (a build directory) when it is set, else from gpu-bundle/bundle.tgz in
# this script's repository (scripts/gpu_bundle.sh), else from build/. OUT: $OUT (the device tool's), else the argument, else
# ./device-check-out. It holds summary.txt, results.json (one record per step), log.txt (every
# step's output), reports.json (the conversions' reports) and nvidia-smi.txt. Exit 0 when every
# step that ran passed, 1 otherwise.
# Environment: LAYERS (default 4), NSAMPLES / SEQLEN of the 7B conversions (default: the
# methods' defaults, 128 x 2048 for GPTQ), LQ_BUILD.
set -uo pipefail
DRY=0
if [ "${1:-}" = --dry-run ]; then
    DRY=1
    shift
fi
if [ $# -lt 1 ] || ! [ "$1" -gt 0 ] 2>/dev/null; then
    echo "usage: $0 [--dry-run] BUDGET_S [OUT]" >&2
    exit 2
fi
BUDGET=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
O=${OUT:-${2:-$PWD/device-check-out}}
mkdir -p "$O" || exit 2
O=$(cd "$O" && pwd)
T0=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lqdev.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG=$O/log.txt
RES=$O/results.jsonl
: >"$LOG"
: >"$RES"
: >"$O/summary.txt"
: >"$O/reports.jsonl"

BUNDLE=$WORK/bundle
if [ -z "${LQ_BUILD:-}" ] && [ -f "$ROOT/gpu-bundle/bundle.tgz" ]; then
    mkdir -p "$BUNDLE" && tar -C "$BUNDLE" -xzf "$ROOT/gpu-bundle/bundle.tgz"
fi
if [ -d "$BUNDLE/bin" ]; then
    export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # CUDA's libraries wherever this machine keeps them (the toolkit, or Python's nvidia wheels)
    for so in $(ldd "$BUNDLE/bin/llmquant" 2>/dev/null | awk '/not found/{print $1}'); do
        d=$(find /usr/local /usr/lib /opt -maxdepth 8 -name "$so" 2>/dev/null | head -1)
        [ -n "$d" ] && LD_LIBRARY_PATH="$(dirname "$d"):$LD_LIBRARY_PATH"
    done
    export LD_LIBRARY_PATH
fi
bin() { # the path of binary $1
    local d
    for d in "$BUNDLE/bin" "${LQ_BUILD:-$ROOT/build}" "${LQ_BUILD:-$ROOT/build}/tests" \
        "${LQ_BUILD:-$ROOT/build}/bench"; do
        if [ -x "$d/$1" ]; then
            echo "$d/$1"
            return
        fi
    done
    echo "/nonexistent/$1"
}
LQ=$(bin llmquant)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
say() { echo "device_check: $*" | tee -a "$O/summary.txt"; }

# step NAME CAP_S CMD...: runs CMD under min(CAP_S, time left - 5 s), its output into the log; a
# record {"step","status","rc","seconds"} into results; status pass / fail / timeout / skipped.
FAILED=0
step() {
    local name=$1 cap=$2
    shift 2
    local l t rc s t1
    l=$(left)
    t=$((cap < l - 5 ? cap : l - 5))
    if [ "$t" -lt 5 ]; then
        echo "{\"step\":\"$name\",\"status\":\"skipped\",\"why\":\"no time left\"}" >>"$RES"
        say "$name: skipped (no time left)"
        return 0
    fi
    echo "==== $name (timeout ${t}s) $(date -u +%T)" >>"$LOG"
    t1=$(date +%s.%N)
    # in a shell of its own: a step may be one of the functions below (exported)
    timeout -k 5 "$t" bash -c '"$@"' step "$@" >>"$LOG" 2>&1
    rc=$?
    s=$(python3 -c "import time; print(round(time.time() - $t1, 2))" 2>/dev/null || echo 0)
    case $rc in
    0) st=pass ;;
    77) st=skipped ;;
    124 | 137) st=timeout ;;
    *) st=fail ;;
    esac
    [ "$st" = pass ] || [ "$st" = skipped ] || FAILED=1
    echo "{\"step\":\"$name\",\"status\":\"$st\",\"rc\":$rc,\"seconds\":$s}" >>"$RES"
    say "$name: $st (rc $rc, ${s}s)"
    return 0
}

# ---- the machine -------------------------------------------------------------------------
if [ $DRY = 1 ]; then
    BE=cpu DEV=cpu
    say "dry run on $(uname -m), $(nproc) CPUs: the steps on the CPU backends"
    echo "dry run: no GPU" >"$O/nvidia-smi.txt"
else
    BE=cuda DEV=cuda
    nvidia-smi >"$O/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed"
    say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi
say "binaries: $(dirname "$LQ"), budget ${BUDGET}s"
miss=$(ldd "$LQ" 2>/dev/null | awk '/not found/{print $1}' | tr '\n' ' ')
[ -z "$miss" ] || say "libraries not found: $miss(LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
"$LQ" --version >>"$LOG" 2>&1 || say "llmquant does not run: $LQ"

# ---- 1. ops and the forward on the backend ---------------------------------------------------
step ops "$((DRY ? 60 : 120))" "$(bin test_ops)" -b $BE
if [ $DRY = 1 ]; then
    step forward "60" "$(bin test_forward_be)"
else
    step forward "120" "$(bin test_forward_be)" -b cuda
fi

# ---- 2. stories260K: every method on the GPU and on the CPU, perplexity of each output ------
S260=$ROOT/examples/stories260K
TXT=$ROOT/examples/data/tinystories_sample.txt
quality() {
    local m dev ok=0
    for m in gptq awq int8 nf4 rtn; do
        for dev in cpu "$DEV"; do
            local out=$WORK/s260_${m}_$dev extra=()
            case $m in
            gptq | awq) extra=(--group-size 32 --calib "$TXT" --nsamples 32 --seqlen 256) ;;
            int8) extra=(--calib "$TXT" --nsamples 32 --seqlen 256) ;;
            rtn) extra=(--group-size 32) ;;
            esac
            if ! "$LQ" "$m" "$S260" -o "$out" --device "$dev" --force --json -q \
                "${extra[@]}" >"$out.json"; then
                echo "quality: $m on $dev failed" >&2
                ok=1
                continue
            fi
            "$LQ" ppl "$out" --data "$TXT" --device cpu --json -q >"$out.ppl.json" || ok=1
        done
    done
    python3 - "$WORK" "$DEV" <<'EOF' || ok=1
import json, sys, os
w, dev = sys.argv[1], sys.argv[2]
rows, bad = [], 0
for m in ["gptq", "awq", "int8", "nf4", "rtn"]:
    try:
        c = json.load(open(f"{w}/s260_{m}_cpu.ppl.json"))["ppl"]
        g = json.load(open(f"{w}/s260_{m}_{dev}.ppl.json"))["ppl"]
    except Exception as e:
        print(f"quality: {m}: no result ({e})"); bad = 1; continue
    rel = (g - c) / c * 100
    rows.append({"method": m, "ppl_cpu_conversion": c, "ppl_device_conversion": g, "diff_percent": rel})
    print(f"quality: {m:5s} ppl of the {dev} conversion {g:.4f}, of the cpu conversion {c:.4f}: {rel:+.3f}%")
    bad |= abs(rel) > 0.5
json.dump(rows, open(f"{w}/quality.json", "w"))
sys.exit(bad)
EOF
    [ -f "$WORK/quality.json" ] && python3 -c "import json,sys; print(json.dumps({'quality': json.load(open(sys.argv[1]))}))" \
        "$WORK/quality.json" >>"$O/reports.jsonl"
    return $ok
}
export -f bin quality
export LQ WORK DEV DRY ROOT BUNDLE O S260 TXT
step quality_stories260k "$((DRY ? 120 : 150))" quality

# ---- 3. a 7B-shaped stack, GPTQ at the default calibration -------------------------------------
L=${LAYERS:-4}
SYN=$WORK/l7b
synth() {
    mkdir -p "$SYN"
    local tok=$ROOT/examples/stories260K/llama2c/tok512.bin
    [ -f "$tok" ] || tok=$ROOT/examples/stories260K/tokenizer.model
    if [ $DRY = 1 ]; then
        "$(bin bench_synth_model)" "$SYN" --hidden 256 --intermediate 688 --layers 2 --heads 4 \
            --kv-heads 4 --tokenizer "$tok"
    else
        "$(bin bench_synth_model)" "$SYN" --hidden 4096 --intermediate 11008 --layers "$L" \
            --heads 32 --kv-heads 32 --tokenizer "$tok"
    fi
}
convert7b() { # method [options...]
    local m=$1
    shift
    local cal=()
    if [ "$m" = nf4 ] || [ "$m" = rtn ]; then
        : # no calibration
    elif [ $DRY = 1 ]; then
        cal=(--nsamples 4 --seqlen 128)
    else
        [ -n "${NSAMPLES:-}" ] && cal+=(--nsamples "$NSAMPLES")
        [ -n "${SEQLEN:-}" ] && cal+=(--seqlen "$SEQLEN")
    fi
    "$LQ" "$m" "$SYN" -o "$WORK/l7b_$m" --device "$DEV" --force --json -q "${cal[@]}" "$@" \
        >"$WORK/l7b_$m.json" || return 1
    python3 - "$WORK/l7b_$m.json" "$m" "$L" <<'EOF' >>"$O/reports.jsonl"
import json, sys
r = json.load(open(sys.argv[1]))
r["synthetic_layers"] = int(sys.argv[3])
print(json.dumps({"l7b_" + sys.argv[2]: r}))
keys = ["seconds", "device", "gpu_peak_bytes", "peak_rss_bytes", "phase_seconds"]
print("7B-shaped %s:" % sys.argv[2], {k: r.get(k) for k in keys}, file=sys.stderr)
EOF
    rm -rf "$WORK/l7b_$m"
}
export -f synth convert7b
export SYN L
step synth_7b "$((DRY ? 60 : 120))" synth
step gptq_7b "$((DRY ? 120 : 300))" convert7b gptq

# ---- 4. the kernel and pipeline tests on the device, the sanitizer --------------------------------
if [ $DRY = 1 ]; then
    step kernels "60" "$(bin test_kernels)" -b cpu -f gptq
    step pipeline "120" env LQ_SRC="$ROOT" LQ_TMP="$WORK/tmp" "$(bin test_pipeline_be)"
    say "memcheck: skipped (dry run)"
else
    step kernels "180" "$(bin test_kernels)" -b cuda
    step pipeline "240" env LQ_BIN="$LQ" LQ_SRC="$ROOT" LQ_TMP="$WORK/tmp" \
        LQ_SHARED="${LQ_SHARED:-$BUNDLE/shared}" "$(bin test_gpu_pipeline)"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        step memcheck "180" compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$(bin test_ops)" -b cuda -p f32
    else
        say "memcheck: compute-sanitizer not found"
    fi
fi

# ---- 5. the other methods on the 7B stack ------------------------------------------------------
step awq_7b "$((DRY ? 120 : 240))" convert7b awq
step int8_7b "$((DRY ? 60 : 120))" convert7b int8
step nf4_7b "$((DRY ? 60 : 90))" convert7b nf4
step rtn_7b "$((DRY ? 60 : 90))" convert7b rtn

# ---- results -----------------------------------------------------------------------------------
python3 - "$RES" "$O/results.json" "$O/reports.jsonl" "$O/reports.json" <<'EOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"steps": steps}, open(sys.argv[2], "w"), indent=1)
reps = {}
for l in open(sys.argv[3]):
    if l.strip():
        reps.update(json.loads(l))
json.dump(reps, open(sys.argv[4], "w"), indent=1)
EOF
rm -f "$RES" "$O/reports.jsonl"
say "done in $(($(date +%s) - T0))s: $([ $FAILED = 0 ] && echo 'every step that ran passed' || echo 'FAILURES (log.txt)')"
exit $FAILED
