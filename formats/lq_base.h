/* lq_base.h -- internal foundation shared by every module: error reporting, checked
 * arithmetic, aligned allocation, time. Depends only on the public header and libc. */
#ifndef LQ_BASE_H
#define LQ_BASE_H

#include "llmquant.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define LQ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define LQ_UNLIKELY(x)  __builtin_expect(!!(x), 0)
#else
#define LQ_PRINTF(a, b)
#define LQ_UNLIKELY(x) (x)
#endif

/* Record code + formatted one-line message in err (may be NULL) and return code. The message
 * should name the file/tensor first: "model.safetensors: header length 2^40 over limit". */
lq_status lq_fail(lq_err *err, lq_status code, const char *fmt, ...) LQ_PRINTF(3, 4);
lq_status lq_failv(lq_err *err, lq_status code, const char *fmt, va_list ap);
/* Prefix an existing message: "ctx: <old message>" (keeps the code). */
lq_status lq_err_prefix(lq_err *err, const char *fmt, ...) LQ_PRINTF(2, 3);

#define LQ_FAIL(err, code, ...) return lq_fail((err), (code), __VA_ARGS__)
#define LQ_RETURN_IF(cond, err, code, ...)                                                         \
    do {                                                                                           \
        if (LQ_UNLIKELY(cond))                                                                     \
            return lq_fail((err), (code), __VA_ARGS__);                                            \
    } while (0)
#define LQ_TRY(expr)                                                                               \
    do {                                                                                           \
        lq_status lq_try_s_ = (expr);                                                              \
        if (lq_try_s_ != LQ_OK)                                                                    \
            return lq_try_s_;                                                                      \
    } while (0)
/* For functions with one `done:` cleanup label and a local `lq_status st`. */
#define LQ_TRY_GOTO(expr)                                                                          \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != LQ_OK)                                                                           \
            goto done;                                                                             \
    } while (0)
#define LQ_FAIL_GOTO(err, code, ...)                                                               \
    do {                                                                                           \
        st = lq_fail((err), (code), __VA_ARGS__);                                                  \
        goto done;                                                                                 \
    } while (0)

/* errno -> status for file operations (ENOSPC -> DISK_FULL, EACCES -> PERMISSION, ...). */
lq_status lq_status_from_errno(int e);

/* Overflow-checked arithmetic; return false on overflow or negative operands. */
bool lq_mul_i64(int64_t a, int64_t b, int64_t *out);
bool lq_add_i64(int64_t a, int64_t b, int64_t *out);

/* 64-byte aligned allocation (free with lq_aligned_free). Returns NULL on size 0 or failure. */
void *lq_aligned_alloc(size_t size);
void  lq_aligned_free(void *p);
/* calloc/malloc that take int64 element counts and check the product. */
void *lq_calloc_n(int64_t count, size_t elem);
void *lq_malloc_n(int64_t count, size_t elem);

/* Monotonic seconds. */
double lq_now(void);

/* Peak resident set size of this process in bytes (0 if unknown). */
int64_t lq_peak_rss_bytes(void);
int64_t lq_cur_rss_bytes(void);
/* Physical memory of the machine in bytes (0 if unknown). */
int64_t lq_phys_mem_bytes(void);

/* Deterministic RNG (splitmix64 seeded xoshiro256**); state is caller-owned: no globals. */
typedef struct lq_rng {
    uint64_t s[4];
} lq_rng;
void     lq_rng_seed(lq_rng *r, uint64_t seed);
uint64_t lq_rng_u64(lq_rng *r);
double   lq_rng_uniform(lq_rng *r); /* [0, 1) */
float    lq_rng_normal(lq_rng *r);  /* N(0, 1), Box-Muller */
/* Uniform integer in [0, n) without modulo bias. */
uint64_t lq_rng_below(lq_rng *r, uint64_t n);

/* Growable byte buffer, kept NUL-terminated (text can be read from p directly). An allocation
 * failure sets oom and makes further appends no-ops, so builders check once at the end. */
typedef struct lq_buf {
    char   *p;
    int64_t n, cap;
    int     oom;
} lq_buf;
void lq_buf_put(lq_buf *b, const void *data, int64_t n);
void lq_buf_str(lq_buf *b, const char *s);
void lq_buf_free(lq_buf *b);

/* malloc'd copy of n bytes plus a NUL (NULL when out of memory). */
char *lq_strndup(const char *s, int64_t n);

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool lq_utf8_valid(const char *s, int64_t n);
/* The ASCII whitespace Python's str.strip() and the text readers mean: space \t \n \r \f \v. */
bool lq_ascii_space(char c);

/* Path helpers: join into buf (returns false if it does not fit). */
bool lq_path_join(char *buf, size_t cap, const char *dir, const char *name);
bool lq_file_exists(const char *path);
bool lq_dir_exists(const char *path);
/* Read a whole file into a NUL-terminated malloc'd buffer. max_bytes bounds the size. */
lq_status lq_read_file(const char *path, int64_t max_bytes, char **data, int64_t *len, lq_err *err);

#endif
