#include "lq_base.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void set_msg(lq_err *err, const char *fmt, va_list ap) {
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    /* One line: a message is printed as-is by the CLI. */
    for (char *p = err->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

lq_status lq_failv(lq_err *err, lq_status code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        set_msg(err, fmt, ap);
    }
    return code;
}

lq_status lq_fail(lq_err *err, lq_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lq_failv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

lq_status lq_err_prefix(lq_err *err, const char *fmt, ...) {
    if (!err)
        return LQ_OK;
    char    pre[256];
    char    old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is acceptable: the message stays one bounded line. */
    size_t pl = strlen(pre);
    if (pl > sizeof err->msg - 3)
        pl = sizeof err->msg - 3;
    memcpy(err->msg, pre, pl);
    memcpy(err->msg + pl, ": ", 2);
    size_t room = sizeof err->msg - pl - 3;
    size_t ol   = strnlen(old, room);
    memcpy(err->msg + pl + 2, old, ol);
    err->msg[pl + 2 + ol] = 0;
    return err->code;
}

lq_status lq_status_from_errno(int e) {
    switch (e) {
    case ENOSPC:
#ifdef EDQUOT
    case EDQUOT:
#endif
    case EFBIG:
        return LQ_ERR_DISK_FULL;
    case EACCES:
    case EPERM:
    case EROFS:
        return LQ_ERR_PERMISSION;
    case ENOENT:
    case ENOTDIR:
        return LQ_ERR_NOT_FOUND;
    case EEXIST:
    case ENOTEMPTY:
        return LQ_ERR_EXISTS;
    case ENOMEM:
        return LQ_ERR_NOMEM;
    default:
        return LQ_ERR_IO;
    }
}

bool lq_mul_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0)
        return false;
    return !__builtin_mul_overflow(a, b, out);
}

bool lq_add_i64(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0)
        return false;
    return !__builtin_add_overflow(a, b, out);
}

void *lq_aligned_alloc(size_t size) {
    if (size == 0)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, (size + 63) & ~(size_t)63) != 0)
        return NULL;
    return p;
}

void lq_aligned_free(void *p) {
    free(p);
}

void *lq_calloc_n(int64_t count, size_t elem) {
    int64_t bytes;
    if (count <= 0 || !lq_mul_i64(count, (int64_t)elem, &bytes))
        return NULL;
    return calloc((size_t)count, elem);
}

void *lq_malloc_n(int64_t count, size_t elem) {
    int64_t bytes;
    if (count <= 0 || !lq_mul_i64(count, (int64_t)elem, &bytes))
        return NULL;
    return malloc((size_t)bytes);
}

double lq_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t lq_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (int64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

int64_t lq_cur_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    long long pages = 0, rss = 0;
    int       ok = fscanf(f, "%lld %lld", &pages, &rss) == 2;
    fclose(f);
    return ok ? (int64_t)rss * 4096 : 0;
}

int64_t lq_phys_mem_bytes(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void lq_rng_seed(lq_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t lq_rng_u64(lq_rng *r) {
    uint64_t *s      = r->s;
    uint64_t  result = rotl(s[1] * 5, 7) * 9;
    uint64_t  t      = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double lq_rng_uniform(lq_rng *r) {
    return (double)(lq_rng_u64(r) >> 11) * 0x1.0p-53;
}

float lq_rng_normal(lq_rng *r) {
    double u1 = lq_rng_uniform(r), u2 = lq_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

uint64_t lq_rng_below(lq_rng *r, uint64_t n) {
    if (n <= 1)
        return 0;
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = lq_rng_u64(r);
    while (x >= lim);
    return x % n;
}

bool lq_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl  = strlen(dir);
    int    sep = dl > 0 && dir[dl - 1] != '/';
    int    n   = snprintf(buf, cap, "%s%s%s", dir, sep ? "/" : "", name);
    return n >= 0 && (size_t)n < cap;
}

bool lq_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool lq_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

lq_status lq_read_file(const char *path, int64_t max_bytes, char **data, int64_t *len,
                       lq_err *err) {
    *data   = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        LQ_FAIL(err, LQ_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size > max_bytes) {
        fclose(f);
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: %lld bytes exceeds the %lld-byte limit", path,
                (long long)sb.st_size, (long long)max_bytes);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        fclose(f);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory reading %lld bytes", path,
                (long long)sb.st_size);
    }
    size_t got = fread(buf, 1, (size_t)sb.st_size, f);
    int    bad = ferror(f);
    fclose(f);
    if (bad || got != (size_t)sb.st_size) {
        free(buf);
        LQ_FAIL(err, LQ_ERR_IO, "%s: short read", path);
    }
    buf[got] = 0;
    *data    = buf;
    if (len)
        *len = (int64_t)got;
    return LQ_OK;
}

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool lq_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool lq_utf8_valid(const char *str, int64_t n) {
    const uint8_t *s = (const uint8_t *)str;
    int64_t        i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int      len;
        uint32_t cp;
        if ((c & 0xe0) == 0xc0) {
            len = 2;
            cp  = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            cp  = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            cp  = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

void lq_buf_put(lq_buf *b, const void *data, int64_t n) {
    if (b->oom || n < 0)
        return;
    if (b->n + n + 1 > b->cap) {
        int64_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, (size_t)c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p   = q;
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->n, data, (size_t)n);
    b->n += n;
    b->p[b->n] = 0;
}

void lq_buf_str(lq_buf *b, const char *s) {
    lq_buf_put(b, s, (int64_t)strlen(s));
}

void lq_buf_free(lq_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *lq_strndup(const char *s, int64_t n) {
    char *d = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (d) {
        memcpy(d, s, (size_t)n);
        d[n] = 0;
    }
    return d;
}
