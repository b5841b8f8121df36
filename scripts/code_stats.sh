#!/usr/bin/env bash
# Size of the tree for reviews (#12's before/after): files and lines per folder, and the
# functions longer than 100 and 150 lines (universal-ctags' end lines).
# Usage: scripts/code_stats.sh [REPO_DIR] [--top N]
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
top=${3:-15}
cd "$repo"
files=$(git ls-files -- '*.c' '*.h' '*.cu' '*.cuh')
printf '%-14s %6s %8s\n' folder files lines
for d in include formats kernels kernels/cpu kernels/cuda kernels/ref calib quant quant/algo quant/gpu \
    quant/model quant/methods cli tests bench examples; do
    f=$(printf '%s\n' $files | awk -v d="$d/" 'index($0, d) == 1 && substr($0, length(d) + 1) !~ /\//')
    [ -n "$f" ] || continue
    printf '%-14s %6d %8d\n' "$d" "$(printf '%s\n' $f | wc -l)" "$(cat $f | wc -l)"
done
command -v ctags >/dev/null || { echo "ctags not found: no function lengths" >&2; exit 0; }
# production code only: tests and benchmarks are not counted
ctags -x --_xformat='%{end} %{line} %{input} %{name}' --kinds-C=f --kinds-C++=f --language-force=C \
    $(printf '%s\n' $files | grep -v -e '^tests/' -e '^bench/' -e '^examples/') 2>/dev/null |
    awk '$1 != "" { print $1 - $2 + 1, $3 ":" $2, $4 }' | sort -rn > /tmp/lq_funcs.$$
echo "functions > 150 lines: $(awk '$1 > 150' /tmp/lq_funcs.$$ | wc -l)," \
     "> 100 lines: $(awk '$1 > 100' /tmp/lq_funcs.$$ | wc -l)"
head -n "$top" /tmp/lq_funcs.$$
rm -f /tmp/lq_funcs.$$
