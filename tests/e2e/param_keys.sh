#!/usr/bin/env bash
# Options are typed inside the library (lq_opts, from quant/model/lq_options.def): a misspelt
# field fails to compile. What still names an option by string is the API edge (lq_params_get /
# lq_params_set, lq_param_find for the table's metadata): every such literal must be a row of
# lq_options.def, and library code must not read option values by string.
source "$(dirname "$0")/cli_lib.bash"
SRC=${LQ_SRC:?}
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 reads the sources"; exit 77; }
set +e
python3 - "$SRC" >"$T/out" 2>&1 <<'EOF'
import glob, os, re, sys
src = sys.argv[1]
table = open(os.path.join(src, "quant", "model", "lq_options.def")).read()
rows = dict(re.findall(r'^LQ_OPT\(([a-z_0-9]+),\s*([A-Z]+),', table, re.M))
bad, uses = [], 0
for f in glob.glob(os.path.join(src, "*", "**", "*.c"), recursive=True) + \
        glob.glob(os.path.join(src, "*", "**", "*.cu"), recursive=True):
    rel = os.path.relpath(f, src)
    if rel.startswith(("tests/", "build")):
        continue
    text = open(f, errors="replace").read()
    for m in re.finditer(r'\b(lq_params_get|lq_params_set|lq_param_find)\((?:[^,()]+,\s*)?"([a-z_0-9]+)"', text):
        uses += 1
        fn, name = m.groups()
        if name not in rows:
            bad.append(f"{rel}: \"{name}\" is not an option")
        if fn == "lq_params_get" and not rel.startswith("cli/"):
            bad.append(f"{rel}: library code reads option \"{name}\" by string (use lq_opts)")
    if re.search(r'\blq_params_(i64|f64|bool|size|is_set)\(', text):
        bad.append(f"{rel}: string-keyed option getter")
print(f"{uses} string uses of {len(rows)} options")
print("\n".join(bad))
sys.exit(1 if bad or len(rows) < 40 else 0)
EOF
RC=$?
set -e
expect_rc 0 "option lookups: $(cat "$T/out")"
finish
