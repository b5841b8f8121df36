#!/usr/bin/env bash
# The installed library is usable by other programs: cmake --install, pkg-config, the header as
# C11 and C++17, only the lq_* API exported, and examples/qlinear_example.c running quantized
# layers of checkpoints the CLI wrote (GPTQ via rtn, NF4, INT8).
set -u
S=${LQ_SHARED:-}
[ -d "$S/models/stories260K" ] || { echo "SKIP: LQ_SHARED not set"; exit 77; }
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config missing"; exit 77; }
T=$LQ_TMP
rm -rf "$T"; mkdir -p "$T"; cd "$T"
fail=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi; }

cmake --install "$LQ_BUILD" --prefix "$T/prefix" > install.log 2>&1
check '[ $? = 0 ] && [ -f prefix/include/llmquant.h ]' "cmake --install"
LIBDIR=$(dirname "$(find prefix -name llmquant.pc | head -1)")/..
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig LD_LIBRARY_PATH=$LIBDIR
check '[ "$(pkg-config --modversion llmquant)" = "$("$LQ_BIN" --version | awk "{print \$2}")" ]' "pkg-config version matches the CLI"

# A sanitizer build installs an instrumented library: programs linking it need the runtime too.
SO=$(find prefix -name 'libllmquant.so.*' | head -1)
SAN=""
nm -D "$SO" | grep -q " U __asan_init" && SAN="$SAN -fsanitize=address"
nm -D "$SO" | grep -q " U __ubsan_" && SAN="$SAN -fsanitize=undefined"

# The public header compiles alone as C11 and C++17, warnings as errors.
printf '#include <llmquant.h>\nint main(void){return lq_version()==LQ_VERSION_NUMBER?0:1;}\n' > h.c
cc $SAN -std=c11 -Wall -Wextra -Wpedantic -Werror h.c $(pkg-config --cflags --libs llmquant) -o h_c
check '[ $? = 0 ] && ./h_c' "header as C11, linked through pkg-config"
if command -v c++ >/dev/null; then
    printf '#include <llmquant.h>\n#include <cstdio>\nint main(){lq_err e{}; lq_qlinear q{}; (void)e; (void)q; std::printf("%%s\\n", lq_status_name(LQ_ERR_ST_TRUNCATED)); return 0;}\n' > h.cpp
    c++ $SAN -std=c++17 -Wall -Wextra -Wpedantic -Werror h.cpp $(pkg-config --cflags --libs llmquant) -o h_cpp
    check '[ $? = 0 ] && [ "$(./h_cpp)" = LQ_ERR_ST_TRUNCATED ]' "header as C++17"
fi

# Only the API is exported from the shared library.
bad=$(nm -D --defined-only "$SO" | awk '$2 ~ /[TDBR]/ {print $3}' | grep -v '^lq_' | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' || true)
check '[ -z "$bad" ]' "only lq_* symbols exported (extra: $(echo $bad | head -c 200))"
check '[ $(nm -D --defined-only "$SO" | grep -c " T lq_") -ge 30 ]' "API symbols exported"

cc $SAN -std=c11 -O2 -Wall -Wextra -Werror "$LQ_SRC/examples/qlinear_example.c" $(pkg-config --cflags --libs llmquant) -lm -o qlinear_example
check '[ $? = 0 ]' "example builds against the installed library"
M=$S/models/stories260K
"$LQ_BIN" -q rtn "$M" -o ck-gptq --group-size 32
"$LQ_BIN" -q nf4 "$M" -o ck-nf4
"$LQ_BIN" -q int8 "$M" -o ck-int8 --tokenizer "$M/llama2c/tok512.bin" --calib "$S/data/tinystories/tinystories_sample.txt" --nsamples 4 --seqlen 128
for ck in ck-gptq:model.layers.0.self_attn.q_proj ck-nf4:model.layers.1.mlp.down_proj ck-int8:model.layers.2.self_attn.v_proj; do
    d=${ck%%:*}; mod=${ck#*:}
    ./qlinear_example "$d" "$mod" 5 > ex.out 2>&1
    check '[ $? = 0 ] && grep -q "^OK" ex.out' "example runs $mod of $d"
    cat ex.out
done
exit $fail
