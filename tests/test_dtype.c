/* fp16 / bf16 <-> fp32 conversions against slow references that share no code with the
 * bit-twiddling versions: decoding is sign * mantissa * 2^exp via ldexp, encoding picks the
 * nearest representable value by binary search over the monotonic list of positive codes (ties
 * to the even code, the code after the largest finite value standing for Inf). Exhaustive where
 * the domain is 2^16, every rounding tie, and random floats from fixed seeds. */
#include "lq_dtype.h"
#include "lq_base.h"
#include "lq_test.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- references -------------------------------------------------------------------------- */

static double ref_f16_value(uint16_t h) { /* finite codes only */
    int    e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double ref_bf16_value(uint16_t h) {
    int    e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
    return (h & 0x8000) ? -v : v;
}

/* Positive codes 0..inf_code in increasing value; inf_code stands for the value one step past
 * the largest finite one (2^16 for fp16, 2^128 for bf16), which is how IEEE round-to-nearest
 * decides overflow. */
typedef struct ref_table {
    double   v[0x8000];
    uint16_t inf_code;
} ref_table;

static void build_table(ref_table *t, int bf16) {
    t->inf_code = bf16 ? 0x7f80 : 0x7c00;
    for (uint32_t c = 0; c < t->inf_code; c++)
        t->v[c] = bf16 ? ref_bf16_value((uint16_t)c) : ref_f16_value((uint16_t)c);
    t->v[t->inf_code] = bf16 ? ldexp(1, 128) : ldexp(1, 16);
}

static uint16_t ref_encode(const ref_table *t, float f) {
    uint32_t u    = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    double   a    = fabs((double)f);
    if (a >= t->v[t->inf_code])
        return sign | t->inf_code;
    int lo = 0, hi = t->inf_code; /* v[lo] <= a < v[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (t->v[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double mid = (t->v[lo] + t->v[hi]) / 2; /* exact: both are short binary fractions */
    int    c   = a < mid ? lo : a > mid ? hi : ((lo & 1) ? hi : lo);
    return sign | (uint16_t)c;
}

/* ---- checks ------------------------------------------------------------------------------ */

static void test_f16_decode_exhaustive(void) {
    int bad = 0, reported = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float    got = lq_f16_to_f32((uint16_t)h);
        int      e   = (h >> 10) & 0x1f;
        uint32_t gb  = f32_bits(got);
        if (e == 31) {
            int m = h & 0x3ff;
            /* Inf stays Inf; NaN stays NaN with its sign and payload (numpy does the same) */
            int ok = (gb >> 31) == (h >> 15) && (gb & 0x7f800000u) == 0x7f800000u &&
                     (gb & 0x7fffff) == (uint32_t)m << 13;
            bad += !ok;
        } else {
            double want = ref_f16_value((uint16_t)h);
            bad += !((double)got == want && !!signbit(got) == !!signbit(want));
        }
        if (bad == 1 && !reported++)
            fprintf(stderr, "f16 decode mismatch at 0x%04x\n", h);
    }
    CHECK_MSG(bad == 0, "%d fp16 codes decode wrongly", bad);
}

static void test_bf16_decode_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = lq_bf16_to_f32((uint16_t)h);
        if (((h >> 7) & 0xff) == 0xff)
            bad += f32_bits(got) != h << 16; /* Inf/NaN: same bits widened */
        else
            bad += !((double)got == ref_bf16_value((uint16_t)h) &&
                     !!signbit(got) == ((h & 0x8000) != 0));
    }
    CHECK_MSG(bad == 0, "%d bf16 codes decode wrongly", bad);
}

static int check_encode(const ref_table *t, int bf16, float f, uint64_t seed, int *reported) {
    uint16_t got = bf16 ? lq_f32_to_bf16(f) : lq_f32_to_f16(f);
    if (isnan(f)) {
        uint16_t em = bf16 ? 0x7f80 : 0x7c00, mm = bf16 ? 0x7f : 0x3ff;
        int      ok = (got & em) == em && (got & mm) != 0 &&
                 (got & 0x8000) == ((f32_bits(f) >> 16) & 0x8000);
        if (!ok && !(*reported)++)
            fprintf(stderr, "%s(NaN 0x%08x) = 0x%04x is not a NaN of that sign (seed %llu)\n",
                    bf16 ? "bf16" : "f16", f32_bits(f), got, (unsigned long long)seed);
        return ok;
    }
    uint16_t want = ref_encode(t, f);
    if (got != want && !(*reported)++)
        fprintf(stderr, "%s(%a = 0x%08x) = 0x%04x, reference 0x%04x (seed %llu)\n",
                bf16 ? "bf16" : "f16", (double)f, f32_bits(f), got, want,
                (unsigned long long)seed);
    return got == want;
}

static void test_encode(int bf16) {
    static ref_table t;
    build_table(&t, bf16);
    const char *nm       = bf16 ? "bf16" : "f16";
    int         reported = 0;
    int64_t     n = 0, bad = 0;

    /* every code round-trips; every tie between neighbours and its two f32 neighbours */
    for (uint32_t c = 0; c < t.inf_code; c++) {
        for (int s = 0; s < 2; s++) {
            uint16_t code = (uint16_t)(c | (s ? 0x8000 : 0));
            float    v    = bf16 ? lq_bf16_to_f32(code) : lq_f16_to_f32(code);
            n++;
            bad += !check_encode(&t, bf16, v, 0, &reported);
            double mid = (t.v[c] + t.v[c + 1]) / 2;
            if (mid > FLT_MAX || (double)(float)mid != mid)
                continue; /* only the tie just below bf16's Inf is not an f32 value */
            float fm = (float)mid;
            float cases[3] = {fm, nextafterf(fm, 0), nextafterf(fm, INFINITY)};
            for (int k = 0; k < 3; k++) {
                float x = s ? -cases[k] : cases[k];
                n++;
                bad += !check_encode(&t, bf16, x, 0, &reported);
            }
        }
    }
    /* edge values */
    const float edges[] = {0.0f, -0.0f, FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MAX, -FLT_MAX,
                           INFINITY, -INFINITY, NAN, -NAN, bits_f32(0x7f800001u),
                           bits_f32(0xffc00001u), 65504.0f, 65519.99f, 65520.0f, 65536.0f,
                           0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f, 0x1p-14f,
                           0x1.ffcp-15f, 1.0f, 1.0009765625f, 3.14159265f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
        n++;
        bad += !check_encode(&t, bf16, edges[i], 0, &reported);
    }
    /* random: all bit patterns, and the range where the target format has its normals and
     * subnormals (exponent near the target's span) */
    const uint64_t seeds[2] = {12345, 777};
    for (int si = 0; si < 2; si++) {
        lq_rng r;
        lq_rng_seed(&r, seeds[si]);
        for (int i = 0; i < 400000; i++) {
            uint32_t u = (uint32_t)lq_rng_u64(&r);
            if (si == 1) { /* exponent within the target's range +- a few */
                uint32_t lo = bf16 ? 0 : 95, span = bf16 ? 256 : 60;
                uint32_t e  = lo + (uint32_t)lq_rng_below(&r, span);
                if (e > 255)
                    e = 255;
                u = (u & 0x807fffffu) | (e << 23);
            }
            n++;
            bad += !check_encode(&t, bf16, bits_f32(u), seeds[si], &reported);
        }
    }
    CHECK_MSG(bad == 0, "%s encode: %lld of %lld values differ from the reference", nm,
              (long long)bad, (long long)n);
    printf("%s encode: %lld values checked\n", nm, (long long)n);
}

static void test_arrays(void) {
    /* lq_convert_to_f32 reads unaligned sources (safetensors data after an odd-length header)
     * and counts non-finite values */
    uint8_t raw[1 + 8 * 6];
    float   out[6];
    const float src[6] = {1.5f, -2.25f, 0.0f, 65504.0f, -0x1p-24f, 1024.0f};
    for (int i = 0; i < 6; i++) {
        uint16_t h = lq_f32_to_f16(src[i]);
        memcpy(raw + 1 + 2 * i, &h, 2);
    }
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_F16, raw + 1, 6, out), 0);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(out[i] == src[i], "F16[%d] = %g, want %g", i, out[i], src[i]);
    for (int i = 0; i < 6; i++) {
        uint16_t h = lq_f32_to_bf16(src[i]);
        memcpy(raw + 1 + 2 * i, &h, 2);
    }
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_BF16, raw + 1, 6, out), 0);
    CHECK(out[0] == 1.5f && out[1] == -2.25f && out[5] == 1024.0f && out[3] == 65536.0f);
    const double d[6] = {1e300, -0.5, NAN, 3.0, -INFINITY, 1e-50};
    memcpy(raw + 1, d, sizeof d);
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_F64, raw + 1, 6, out), 3); /* 1e300 -> inf, NaN, -inf */
    CHECK(out[1] == -0.5f && out[3] == 3.0f && out[5] == 0.0f && isinf(out[0]));
    memcpy(raw + 1, src, sizeof src);
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_F32, raw + 1, 6, out), 0);
    CHECK(memcmp(out, src, sizeof src) == 0);
    CHECK_EQ_INT(lq_convert_to_f32(LQ_DT_I32, raw + 1, 2, out), -1);

    float    f[5] = {0.1f, -7.0f, 1e6f, NAN, 3e-8f};
    uint16_t h[5];
    lq_f32_to_f16_array(f, 5, h);
    float back[5];
    lq_f16_to_f32_array(h, 5, back);
    for (int i = 0; i < 5; i++) {
        CHECK(h[i] == lq_f32_to_f16(f[i]));
        CHECK(isnan(f[i]) ? isnan(back[i]) : back[i] == lq_round_f16(f[i]));
    }
    CHECK(isinf(back[2]));
}

static void test_names(void) {
    /* the dtype strings of the safetensors spec, sizes per element */
    static const struct {
        const char *name;
        int         size;
    } spec[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
                {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
                {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        int t = lq_dtype_from_name(spec[i].name, strlen(spec[i].name));
        CHECK_MSG(t >= 0, "dtype %s unknown", spec[i].name);
        if (t >= 0) {
            CHECK_EQ_INT(lq_dtype_size((lq_dtype)t), spec[i].size);
            CHECK(strcmp(lq_dtype_name((lq_dtype)t), spec[i].name) == 0);
        }
    }
    CHECK_EQ_INT(lq_dtype_from_name("F1", 2), -1);
    CHECK_EQ_INT(lq_dtype_from_name("F16x", 3), LQ_DT_F16); /* length-delimited */
    CHECK_EQ_INT(lq_dtype_from_name("f16", 3), -1);
    CHECK(lq_dtype_is_float(LQ_DT_BF16) && !lq_dtype_is_float(LQ_DT_I8));
}

int main(void) {
    test_f16_decode_exhaustive();
    test_bf16_decode_exhaustive();
    test_encode(0);
    test_encode(1);
    test_arrays();
    test_names();
    return lq_test_end("dtype");
}
