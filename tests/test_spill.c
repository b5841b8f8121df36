/* Activation spill store: bit-exact round trips in and out of the zstd temp file, the memory
 * budget (held chunk bytes and process RSS), clear/reuse, error paths. */
#include "lq_spill.h"
#include "lq_test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#if defined(__SANITIZE_ADDRESS__)
#define LQ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LQ_ASAN 1
#endif
#endif

/* Activation-like data: N(0, 1) scaled per "channel", rounded through fp16 as real activations
 * of an fp16 model are (so the low mantissa bytes compress). */
static void fill(float *x, int64_t n, uint64_t seed, int fp16_like) {
    lq_rng r;
    lq_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        float v = lq_rng_normal(&r) * (float)(1 + i % 64);
        if (fp16_like) {
            uint32_t b;
            memcpy(&b, &v, 4);
            b &= 0xFFFFE000u; /* keep 10 mantissa bits */
            memcpy(&v, &b, 4);
        }
        x[i] = v;
    }
}

static int count_spill_files(const char *dir) {
    DIR *d = opendir(dir);
    int  n = 0;
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strncmp(de->d_name, "llmquant-spill-", 15) == 0;
    closedir(d);
    return n;
}

static void test_budget(const char *dir) {
    enum { CH = 65536 + 123, NCH = 24 }; /* chunks straddle the 64Ki-float shuffle block */
    const int64_t budget = 4 * (int64_t)CH * 4 + 100; /* room for exactly 4 chunks */
    lq_spill     *s      = NULL;
    lq_err        e      = {0};
    CHECK_EQ_INT(lq_spill_create(budget, dir, &s, &e), LQ_OK);
    float *x = malloc(CH * sizeof(float)), *y = malloc(CH * sizeof(float));
    for (int i = 0; i < NCH; i++) {
        fill(x, CH, 100 + (uint64_t)i, i % 2);
        CHECK_EQ_INT(lq_spill_append(s, x, CH, &e), LQ_OK);
        lq_spill_stats st;
        lq_spill_get_stats(s, &st);
        CHECK_MSG(st.mem_bytes <= budget, "after %d chunks %lld bytes held > budget %lld", i + 1,
                  (long long)st.mem_bytes, (long long)budget);
    }
    CHECK_EQ_INT(lq_spill_count(s), NCH);
    lq_spill_stats st;
    lq_spill_get_stats(s, &st);
    CHECK_EQ_INT(st.chunks, NCH);
    CHECK_EQ_INT(st.chunks_on_disk, NCH - 4);
    CHECK_EQ_INT(st.mem_bytes, 4 * (int64_t)CH * 4);
    CHECK_EQ_INT(st.mem_peak, 4 * (int64_t)CH * 4);
    CHECK_EQ_INT(st.disk_raw_bytes, (int64_t)(NCH - 4) * CH * 4);
    CHECK(st.disk_bytes > 0 && st.disk_bytes < st.disk_raw_bytes);
    CHECK_MSG(st.scratch_bytes < 1 << 20, "scratch %lld bytes", (long long)st.scratch_bytes);
    for (int i = 0; i < NCH; i++) {
        CHECK_EQ_INT(lq_spill_chunk_numel(s, i), CH);
        CHECK_EQ_INT(lq_spill_chunk_on_disk(s, i), i >= 4);
    }
    /* the temporary file is unlinked as soon as it is created */
    CHECK_EQ_INT(count_spill_files(dir), 0);
    /* read back in a scrambled order, twice: bit-exact */
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < NCH; k++) {
            int i = (k * 7 + rep * 5) % NCH;
            fill(x, CH, 100 + (uint64_t)i, i % 2);
            memset(y, 0xFF, CH * sizeof(float));
            CHECK_EQ_INT(lq_spill_read(s, i, y, &e), LQ_OK);
            CHECK_MSG(!memcmp(x, y, CH * sizeof(float)), "chunk %d differs", i);
        }
    /* fp16-like chunks (odd ones) must compress far better than random floats, thanks to the
     * byte shuffle; measure both kinds separately */
    lq_spill *a = NULL, *b = NULL;
    CHECK_EQ_INT(lq_spill_create(0, dir, &a, &e), LQ_OK);
    CHECK_EQ_INT(lq_spill_create(0, dir, &b, &e), LQ_OK);
    fill(x, CH, 1, 1);
    CHECK_EQ_INT(lq_spill_append(a, x, CH, &e), LQ_OK);
    fill(x, CH, 1, 0);
    CHECK_EQ_INT(lq_spill_append(b, x, CH, &e), LQ_OK);
    lq_spill_stats sa, sb;
    lq_spill_get_stats(a, &sa);
    lq_spill_get_stats(b, &sb);
    printf("spill: fp16-like chunk %.1f%% of raw, full-precision chunk %.1f%%\n",
           100.0 * (double)sa.disk_bytes / (double)sa.disk_raw_bytes,
           100.0 * (double)sb.disk_bytes / (double)sb.disk_raw_bytes);
    CHECK(sa.disk_bytes < sa.disk_raw_bytes * 3 / 4);
    CHECK(sb.disk_bytes < sb.disk_raw_bytes);
    lq_spill_free(a);
    lq_spill_free(b);

    /* clear and reuse */
    CHECK_EQ_INT(lq_spill_clear(s, &e), LQ_OK);
    CHECK_EQ_INT(lq_spill_count(s), 0);
    lq_spill_get_stats(s, &st);
    CHECK_EQ_INT(st.mem_bytes, 0);
    CHECK_EQ_INT(st.disk_bytes, 0);
    for (int i = 0; i < 6; i++) {
        fill(x, CH, 900 + (uint64_t)i, 0);
        CHECK_EQ_INT(lq_spill_append(s, x, CH, &e), LQ_OK);
    }
    for (int i = 5; i >= 0; i--) {
        fill(x, CH, 900 + (uint64_t)i, 0);
        CHECK_EQ_INT(lq_spill_read(s, i, y, &e), LQ_OK);
        CHECK(!memcmp(x, y, CH * sizeof(float)));
    }
    CHECK_EQ_INT(lq_spill_read(s, 6, y, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_spill_read(s, -1, y, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_spill_chunk_numel(s, 6), -1);
    CHECK_EQ_INT(lq_spill_append(s, x, 0, &e), LQ_ERR_INVALID_ARG);
    lq_spill_free(s);
    free(x);
    free(y);
}

static void test_odd_sizes(const char *dir) {
    /* NaN payloads, infinities, -0 and denormals survive bit for bit */
    static const int64_t sizes[] = {1, 2, 3, 65535, 65536, 65537, 200000};
    for (int mode = 0; mode < 3; mode++) {
        /* all on disk, all in memory, and 300000 bytes: the first four chunks (262164 B) */
        int64_t   budget = mode == 0 ? 0 : mode == 1 ? -1 : 300000;
        lq_spill *s      = NULL;
        lq_err    e      = {0};
        CHECK_EQ_INT(lq_spill_create(budget, dir, &s, &e), LQ_OK);
        float *src[7];
        for (int i = 0; i < 7; i++) {
            src[i]     = malloc((size_t)sizes[i] * sizeof(float));
            lq_rng r;
            lq_rng_seed(&r, (uint64_t)(i + 10 * mode));
            for (int64_t j = 0; j < sizes[i]; j++) {
                uint32_t b = (uint32_t)lq_rng_u64(&r);
                memcpy(&src[i][j], &b, 4);
            }
            CHECK_EQ_INT(lq_spill_append(s, src[i], sizes[i], &e), LQ_OK);
        }
        for (int i = 6; i >= 0; i--) {
            float *d = malloc((size_t)sizes[i] * sizeof(float));
            CHECK_EQ_INT(lq_spill_read(s, i, d, &e), LQ_OK);
            CHECK_MSG(!memcmp(d, src[i], (size_t)sizes[i] * sizeof(float)),
                      "mode %d size %lld differs", mode, (long long)sizes[i]);
            CHECK_EQ_INT(lq_spill_chunk_on_disk(s, i), mode == 0 ? 1 : mode == 1 ? 0 : i >= 4);
            free(d);
        }
        for (int i = 0; i < 7; i++)
            free(src[i]);
        lq_spill_free(s);
    }
}

/* 32 MiB streamed through a 4 MiB budget: the process must not grow by the data volume. */
static void test_rss(const char *dir) {
#ifdef LQ_ASAN
    (void)dir;
    printf("note: RSS check skipped under AddressSanitizer (shadow memory and quarantine)\n");
#else
    enum { CH = 1 << 18 }; /* 1 MiB chunks */
    lq_spill *s = NULL;
    lq_err    e = {0};
    float    *x = malloc(CH * sizeof(float));
    fill(x, CH, 5, 1);
    CHECK_EQ_INT(lq_spill_create(4 << 20, dir, &s, &e), LQ_OK);
    CHECK_EQ_INT(lq_spill_append(s, x, CH, &e), LQ_OK); /* warm up allocator and zstd */
    int64_t before = lq_cur_rss_bytes();
    for (int i = 1; i < 32; i++) {
        fill(x, CH, 5 + (uint64_t)i, 1);
        CHECK_EQ_INT(lq_spill_append(s, x, CH, &e), LQ_OK);
    }
    int64_t after = lq_cur_rss_bytes();
    lq_spill_stats st;
    lq_spill_get_stats(s, &st);
    printf("spill: 32 MiB appended, %lld MiB held, %lld MiB on disk, RSS +%.1f MiB\n",
           (long long)(st.mem_bytes >> 20), (long long)(st.disk_bytes >> 20),
           (double)(after - before) / (1 << 20));
    CHECK(st.mem_bytes <= 4 << 20);
    if (before > 0 && after > 0)
        CHECK_MSG(after - before < (4 << 20) + (8 << 20), "RSS grew by %lld bytes",
                  (long long)(after - before));
    lq_spill_free(s);
    free(x);
#endif
}

int main(void) {
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    char        dir[4096];
    snprintf(dir, sizeof dir, "%s/spill", tmp);
    mkdir(tmp, 0777);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s\n", dir);
        return 1;
    }
    test_budget(dir);
    test_odd_sizes(dir);
    test_rss(dir);

    /* a missing temporary directory fails on the first spill, naming it */
    lq_spill *s = NULL;
    lq_err    e = {0};
    float     x[4] = {1, 2, 3, 4};
    CHECK_EQ_INT(lq_spill_create(0, "/nonexistent-llmquant-dir", &s, &e), LQ_OK);
    CHECK_EQ_INT(lq_spill_append(s, x, 4, &e), LQ_ERR_NOT_FOUND);
    CHECK(strstr(e.msg, "/nonexistent-llmquant-dir") != NULL);
    CHECK_EQ_INT(lq_spill_count(s), 0);
    lq_spill_free(s);
    lq_spill_free(NULL);
    return lq_test_end("spill");
}
