/* llmquant batch JOBS [--shard I/N] [--cache-dir DIR]
 *
 * JOBS is JSON lines, one job per line ('#' lines and blank lines are skipped):
 *   {"model": "models/llama", "method": "gptq", "out": "out/llama-gptq-w4g128",
 *    "options": {"bits": 4, "group_size": 128, "calib": "c4.jsonl.zst", "check_ppl": "wiki.txt"}}
 * Relative paths are relative to the JOBS file's directory, so a scheduler can run it from
 * anywhere. Options are the command-line options without dashes (group_size or group-size).
 *
 * - Jobs run in file order, each in a child process: one job's crash or out-of-memory kill does
 *   not take the batch down, and its peak memory is measured exactly (wait4 rusage).
 * - A job whose output directory already holds an llmquant_report.json carrying this job's
 *   fingerprint is skipped: outputs are renamed into place only when complete, so after a crash
 *   or kill -9 a re-run redoes at most the job that was in flight (its temporary directory is
 *   removed by the next attempt).
 * - --shard I/N runs the jobs whose index i (0-based, in file order) has i % N == I, so a Slurm
 *   array (--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT) spreads a sweep with no
 *   coordination.
 * - The calibration cache (--cache-dir, default <JOBS dir>/.llmquant-cache) shares tokenized
 *   windows and FP layer inputs between jobs on the same model and calibration set.
 * - Exit status: 0 when every selected job succeeded or was already done, LQ_ERR_JOBS_FAILED
 *   (111) when any failed (the others still ran), LQ_ERR_JOB_FILE (110) for a malformed file. */
#define _GNU_SOURCE /* prctl, wait4 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
    int    line;
    char   method[32];
    char  *model, *out; /* malloc'd: a fixed PATH_MAX each made 10^5 jobs cost 1 GB */
    cJSON *options;     /* owned copy */
    char   tag[17];
    /* result */
    int    selected, status, skipped;
    double seconds;
    long   peak_kb;
    char  *report; /* JSON from the job (or the stored report when skipped) */
} job;

/* p relative to the jobs file's directory, malloc'd (NULL: out of memory). */
static char *resolve(const char *base, const char *p) {
    const int rel = p[0] != '/' && base[0];
    size_t    n   = (rel ? strlen(base) + 1 : 0) + strlen(p) + 1;
    char     *out = malloc(n);
    if (out)
        snprintf(out, n, "%s%s%s", rel ? base : "", rel ? "/" : "", p);
    return out;
}

static void free_jobs(job *jobs, int n) {
    for (int i = 0; i < n; i++) {
        cJSON_Delete(jobs[i].options);
        free(jobs[i].report);
        free(jobs[i].model);
        free(jobs[i].out);
    }
    free(jobs);
}

static uint64_t fnv(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static int parse_jobs(cli_ctx *c, const char *path, job **out, int *njobs) {
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_error(c, errno == ENOENT ? LQ_ERR_NOT_FOUND : LQ_ERR_IO, "%s: %s", path,
                         strerror(errno));
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s", path);
    char *sl = strrchr(base, '/');
    if (sl)
        *sl = 0;
    else
        base[0] = 0;
    job   *jobs = NULL;
    int    n = 0, cap = 0, lineno = 0, rc = 0;
    char  *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) >= 0) {
        lineno++;
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        if (!*s || *s == '#')
            continue;
        cJSON *o = cJSON_Parse(s);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            rc = cli_error(c, LQ_ERR_JOB_FILE, "%s:%d: not a JSON object", path, lineno);
            break;
        }
        const cJSON *m = cJSON_GetObjectItem(o, "method"), *md = cJSON_GetObjectItem(o, "model"),
                    *ou = cJSON_GetObjectItem(o, "out"), *op = cJSON_GetObjectItem(o, "options");
        if (!cJSON_IsString(m) || !cJSON_IsString(md) || !cJSON_IsString(ou) ||
            (op && !cJSON_IsObject(op))) {
            cJSON_Delete(o);
            rc = cli_error(c, LQ_ERR_JOB_FILE,
                           "%s:%d: a job needs \"method\", \"model\", \"out\" strings and an "
                           "optional \"options\" object",
                           path, lineno);
            break;
        }
        if (n == cap) {
            cap     = cap ? cap * 2 : 16;
            job *nj = realloc(jobs, (size_t)cap * sizeof *nj);
            if (!nj) {
                cJSON_Delete(o);
                rc = cli_error(c, LQ_ERR_NOMEM, "out of memory");
                break;
            }
            jobs = nj;
        }
        job *j = &jobs[n++];
        memset(j, 0, sizeof *j);
        j->line = lineno;
        snprintf(j->method, sizeof j->method, "%s", m->valuestring);
        j->model   = resolve(base, md->valuestring);
        j->out     = resolve(base, ou->valuestring);
        j->options = op ? cJSON_Duplicate(op, 1) : cJSON_CreateObject();
        if (!j->model || !j->out || !j->options) {
            cJSON_Delete(o);
            rc = cli_error(c, LQ_ERR_NOMEM, "out of memory");
            break;
        }
        /* The fingerprint covers what determines the output, in canonical form. */
        char *canon = cJSON_PrintUnformatted(o);
        snprintf(j->tag, sizeof j->tag, "%016llx", (unsigned long long)fnv(canon ? canon : ""));
        free(canon);
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    *out   = jobs;
    *njobs = n;
    return rc;
}

static lq_status set_err(lq_err *e, lq_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static lq_status set_err(lq_err *e, lq_status code, const char *fmt, ...) {
    char    tmp[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    e->code = code;
    memcpy(e->msg, tmp, sizeof tmp);
    return code;
}

/* Options object -> lq_params (values as text, keys with '-' or '_'). */
static lq_status fill_params(const job *j, lq_params *p, const char *cache_dir, lq_err *err) {
    const cJSON *it;
    cJSON_ArrayForEach(it, j->options) {
        char key[128], val[PATH_MAX];
        snprintf(key, sizeof key, "%s", it->string);
        for (char *k = key; *k; k++)
            if (*k == '-')
                *k = '_';
        if (cJSON_IsBool(it))
            snprintf(val, sizeof val, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it))
            snprintf(val, sizeof val, "%.17g", it->valuedouble);
        else if (cJSON_IsString(it))
            snprintf(val, sizeof val, "%s", it->valuestring);
        else
            return set_err(err, LQ_ERR_JOB_FILE, "line %d: option \"%s\" must be a scalar", j->line,
                           it->string);
        lq_status s = lq_params_set(p, key, val, err);
        if (s != LQ_OK)
            return set_err(err, s == LQ_ERR_INVALID_ARG ? LQ_ERR_JOB_FILE : s, "line %d: %s",
                           j->line, err->msg);
    }
    lq_params_set(p, "job_tag", j->tag, err);
    const lq_param_info *cd = lq_param_find("cache_dir");
    if (cache_dir && *cache_dir && !lq_params_get(p, "cache_dir")[0] && cd &&
        lq_param_applies(cd, j->method))
        lq_params_set(p, "cache_dir", cache_dir, err);
    return LQ_OK;
}

/* Report of a finished output carrying this job's tag, or NULL. */
static char *done_report(const job *j) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/llmquant_report.json", j->out);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char   *buf = NULL;
    size_t  cap = 0;
    ssize_t n   = getdelim(&buf, &cap, '\0', f);
    fclose(f);
    if (n <= 0) {
        free(buf);
        return NULL;
    }
    cJSON       *r   = cJSON_Parse(buf);
    const cJSON *tag = cJSON_GetObjectItem(r, "job_tag");
    int          ok  = cJSON_IsString(tag) && strcmp(tag->valuestring, j->tag) == 0;
    cJSON_Delete(r);
    if (!ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* mkdir -p of the output's parent: sweeps write into fresh trees. */
static void make_parents(const char *path) {
    char   p[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof p)
        return;
    memcpy(p, path, n + 1);
    char *last = strrchr(p, '/');
    if (!last || last == p)
        return;
    *last = 0;
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            mkdir(p, 0755);
            *q = '/';
        }
    mkdir(p, 0755);
}

static void run_child(const job *j, const char *cache_dir, int fd) {
    /* Die with the batch: an orphan would race its own re-run for the output directory. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    lq_params *p   = lq_params_create();
    lq_err     err = {0};
    lq_status  s   = fill_params(j, p, cache_dir, &err);
    char      *rep = NULL;
    if (s == LQ_OK)
        s = lq_quantize(j->method, j->model, j->out, p, NULL, &rep, &err);
    cJSON *o = rep ? cJSON_Parse(rep) : cJSON_CreateObject();
    if (!o)
        o = cJSON_CreateObject();
    if (s != LQ_OK) {
        cJSON_AddNumberToObject(o, "status", s);
        cJSON_AddStringToObject(o, "status_name", lq_status_name(s));
        cJSON_AddStringToObject(o, "error", err.msg);
    }
    char *txt = cJSON_PrintUnformatted(o);
    for (size_t off = 0, len = txt ? strlen(txt) : 0; off < len;) {
        ssize_t w = write(fd, txt + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    _exit(s > 125 ? 1 : (int)s);
}

static void read_all(int fd, char **out) {
    size_t cap = 4096, n = 0;
    char  *b = malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            char *nb = realloc(b, cap);
            if (!nb)
                break;
            b = nb;
        }
        ssize_t k = read(fd, b + n, cap - n - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    b[n] = 0;
    *out = b;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void print_table(cli_ctx *c, job *jobs, int n) {
    FILE *f = c->human;
    fprintf(f, "%-4s %-6s %-28s %-8s %9s %10s %10s %21s\n", "job", "method", "output", "status",
            "time", "peak RSS", "size", "ppl (orig -> quant)");
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        if (!j->selected)
            continue;
        cJSON      *r      = j->report ? cJSON_Parse(j->report) : NULL;
        const char *outb   = strrchr(j->out, '/') ? strrchr(j->out, '/') + 1 : j->out;
        char        st[16] = "ok", t[16] = "-", mem[16] = "-", size[16] = "-", ppl[40] = "-";
        if (j->skipped)
            snprintf(st, sizeof st, "done");
        else if (j->status == LQ_ERR_PPL_BOUND)
            snprintf(st, sizeof st, "ppl-fail");
        else if (j->status)
            snprintf(st, sizeof st, "exit %d", j->status);
        double secs = j->skipped ? jnum(r, "seconds") : j->seconds;
        if (secs >= 0)
            snprintf(t, sizeof t, "%.1fs", secs);
        double pk = j->skipped ? jnum(r, "peak_rss_bytes") : (double)j->peak_kb * 1024;
        if (pk > 0)
            cli_fmt_bytes(pk, mem, sizeof mem);
        if (jnum(r, "output_bytes") > 0)
            cli_fmt_bytes(jnum(r, "output_bytes"), size, sizeof size);
        const cJSON *ch = cJSON_GetObjectItem(r, "ppl_check");
        if (ch)
            snprintf(ppl, sizeof ppl, "%.3f -> %.3f", jnum(ch, "ppl_original"),
                     jnum(ch, "ppl_quantized"));
        fprintf(f, "%-4d %-6s %-28.28s %-8s %9s %10s %10s %21s\n", i, j->method, outb, st, t, mem,
                size, ppl);
        if (j->status && !j->skipped) {
            const cJSON *e = cJSON_GetObjectItem(r, "error");
            if (cJSON_IsString(e))
                fprintf(f, "     error: %s\n", e->valuestring);
        }
        cJSON_Delete(r);
    }
}

int cmd_batch(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    if (a->npos != 1)
        return cli_error(c, LQ_ERR_INVALID_ARG,
                         "usage: llmquant batch JOBS [--shard I/N] "
                         "[--cache-dir DIR]");
    const char *jobs_path = a->pos[0];
    long        si = 0, sn = 1;
    const char *shard = a->flag_val[0];
    if (shard) {
        char *e1, *e2;
        si = strtol(shard, &e1, 10);
        if (*e1 == '/')
            sn = strtol(e1 + 1, &e2, 10);
        if (*e1 != '/' || *e2 || sn < 1 || si < 0 || si >= sn)
            return cli_error(c, LQ_ERR_INVALID_ARG, "--shard \"%s\": expected I/N with 0 <= I < N",
                             shard);
    }
    job *jobs = NULL;
    int  n    = 0;
    int  rc   = parse_jobs(c, jobs_path, &jobs, &n);
    if (rc) {
        free_jobs(jobs, n);
        return rc;
    }
    char cache[PATH_MAX];
    if (a->flag_val[1]) {
        snprintf(cache, sizeof cache, "%s", a->flag_val[1]);
    } else {
        const char *sl = strrchr(jobs_path, '/');
        snprintf(cache, sizeof cache, "%.*s%s.llmquant-cache", sl ? (int)(sl - jobs_path + 1) : 0,
                 jobs_path, "");
    }
    /* Validate every job's options up front: a typo fails fast, not after hours of work. */
    for (int i = 0; i < n; i++) {
        lq_params *p   = lq_params_create();
        lq_err     err = {0};
        lq_status  s   = fill_params(&jobs[i], p, cache, &err);
        lq_params_free(p);
        int known = 0;
        for (int m = 0; m < lq_method_count(); m++)
            known |= !strcmp(lq_method_name(m), jobs[i].method);
        if (s == LQ_OK && !known)
            s = set_err(&err, LQ_ERR_JOB_FILE, "line %d: unknown method \"%s\"", jobs[i].line,
                        jobs[i].method);
        if (s != LQ_OK) {
            rc = cli_error(c, LQ_ERR_JOB_FILE, "%s: %s", jobs_path, err.msg);
            goto done;
        }
    }
    int total = 0, k = 0, failed = 0;
    for (int i = 0; i < n; i++)
        total += (jobs[i].selected = (i % sn) == si);
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        if (!j->selected)
            continue;
        k++;
        if ((j->report = done_report(j))) {
            j->skipped = 1;
            if (!c->quiet)
                fprintf(stderr, "[%d/%d] job %d %s -> %s: already done\n", k, total, i, j->method,
                        j->out);
            continue;
        }
        if (!c->quiet)
            fprintf(stderr, "[%d/%d] job %d %s %s -> %s\n", k, total, i, j->method, j->model,
                    j->out);
        make_parents(j->out);
        int pfd[2];
        if (pipe(pfd) != 0) {
            rc = cli_error(c, LQ_ERR_IO, "pipe: %s", strerror(errno));
            goto done;
        }
        fflush(NULL);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid < 0) {
            rc = cli_error(c, LQ_ERR_NOMEM, "fork: %s", strerror(errno));
            goto done;
        }
        if (pid == 0) {
            close(pfd[0]);
            run_child(j, cache, pfd[1]);
        }
        close(pfd[1]);
        read_all(pfd[0], &j->report);
        close(pfd[0]);
        int           wst = 0;
        struct rusage ru;
        while (wait4(pid, &wst, 0, &ru) < 0 && errno == EINTR)
            ;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        j->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        j->peak_kb = ru.ru_maxrss;
        if (WIFEXITED(wst))
            j->status = WEXITSTATUS(wst);
        else
            j->status = 128 + (WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
        if (j->status)
            failed++;
        if (!c->quiet)
            fprintf(stderr, "[%d/%d] job %d %s in %.1fs\n", k, total, i,
                    j->status ? "FAILED" : "done", j->seconds);
        if (cli_interrupted())
            break;
    }
    if (c->json) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < n; i++) {
            if (!jobs[i].selected)
                continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "job", i);
            cJSON_AddNumberToObject(o, "line", jobs[i].line);
            cJSON_AddStringToObject(o, "method", jobs[i].method);
            cJSON_AddStringToObject(o, "model", jobs[i].model);
            cJSON_AddStringToObject(o, "out", jobs[i].out);
            cJSON_AddStringToObject(o, "job_tag", jobs[i].tag);
            cJSON_AddStringToObject(o, "state",
                                    jobs[i].skipped  ? "already_done"
                                    : jobs[i].status ? "failed"
                                                     : "done");
            cJSON_AddNumberToObject(o, "exit_code", jobs[i].status);
            if (!jobs[i].skipped) {
                cJSON_AddNumberToObject(o, "seconds", jobs[i].seconds);
                cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)jobs[i].peak_kb * 1024);
            }
            cJSON *r = jobs[i].report ? cJSON_Parse(jobs[i].report) : NULL;
            if (r)
                cJSON_AddItemToObject(o, "report", r);
            cJSON_AddItemToArray(arr, o);
        }
        char *s = cJSON_PrintUnformatted(arr);
        printf("%s\n", s ? s : "[]");
        free(s);
        cJSON_Delete(arr);
    }
    if (!c->quiet)
        print_table(c, jobs, n);
    if (failed) { /* the JSON array above is the machine-readable result: one line on stderr */
        fprintf(stderr, "%s: error: %s: %d of %d jobs failed\n", CLI_PROG, jobs_path, failed,
                total);
        rc = LQ_ERR_JOBS_FAILED;
    }
done:
    free_jobs(jobs, n);
    return rc;
}

const cli_flag cli_batch_flags[] = {
    {"shard", 0, "I/N", 0, "run jobs i with i % N == I (0-based; e.g. a Slurm array index)"},
    {"cache-dir", 0, "DIR", 0, "calibration cache shared by the jobs (default: next to JOBS)"},
    {NULL, 0, NULL, 0, NULL},
};
