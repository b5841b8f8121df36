#!/usr/bin/env bash
# Options travel by name (lq_params_get(p, "group_size")): a misspelt name or a getter of the
# wrong type reads 0 / NULL without a word. This reads every literal name the sources pass to an
# lq_params_* getter and checks it is a row of the options table (quant/lq_params.c) of a type the
# getter can read.
source "$(dirname "$0")/cli_lib.bash"
SRC=${LQ_SRC:?}
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 reads the sources"; exit 77; }
set +e
python3 - "$SRC" >"$T/out" 2>&1 <<'EOF'
import glob, os, re, sys
src = sys.argv[1]
table = open(os.path.join(src, "quant", "lq_params.c")).read()
rows = dict(re.findall(r'^\s*\{"([a-z_0-9]+)",\s*(LQ_PT_[A-Z]+)', table, re.M))
ok_types = {"i64": {"LQ_PT_INT"}, "f64": {"LQ_PT_FLOAT", "LQ_PT_INT"}, "bool": {"LQ_PT_BOOL"},
            "size": {"LQ_PT_SIZE"}, "get": None, "is_set": None}
bad, uses = [], 0
for f in glob.glob(os.path.join(src, "*", "**", "*.c"), recursive=True) + \
        glob.glob(os.path.join(src, "*", "**", "*.cu"), recursive=True):
    if "/tests/" in f or "/build" in f:
        continue
    for m in re.finditer(r'lq_params_(get|i64|f64|bool|size|is_set)\([^,()]+,\s*"([a-z_0-9]+)"',
                         open(f, errors="replace").read()):
        uses += 1
        kind, name = m.groups()
        if name not in rows:
            bad.append(f"{os.path.relpath(f, src)}: \"{name}\" is not an option")
        elif ok_types[kind] and rows[name] not in ok_types[kind]:
            bad.append(f"{os.path.relpath(f, src)}: lq_params_{kind}(\"{name}\") on a {rows[name]}")
print(f"{uses} lookups of {len(rows)} options")
print("\n".join(bad))
sys.exit(1 if bad or uses < 50 else 0)
EOF
RC=$?
set -e
expect_rc 0 "option lookups: $(cat "$T/out")"
finish
