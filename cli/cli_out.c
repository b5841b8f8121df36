/* Output of the CLI: one-line errors and warnings, the TTY progress line, SIGINT, reports. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* The one mutable global of the program: a signal handler can only talk to the rest of the
 * program through a volatile sig_atomic_t. */
static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig) {
    g_interrupted = 1;
    /* A second Ctrl-C kills at once if the library is slow to reach a cancellation point. */
    signal(sig, SIG_DFL);
}

void cli_signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cli_signals_restore(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

int cli_interrupted(void) {
    return g_interrupted != 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_clear(cli_ctx *c) {
    if (c->line_shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        c->line_shown = 0;
    }
}

/* The message is one line by contract; a stray newline would still break one-line output. */
static void put_line(FILE *f, const char *prefix, const char *msg) {
    fputs(prefix, f);
    for (const char *p = msg; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
    fputc('\n', f);
}

static void json_error(cli_ctx *c, lq_status s, const char *msg) {
    if (!c->json)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "status", (double)s);
    cJSON_AddStringToObject(o, "status_name", lq_status_name(s));
    cJSON_AddStringToObject(o, "error", msg);
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        printf("%s\n", t);
    free(t);
    cJSON_Delete(o);
}

int cli_error(cli_ctx *c, lq_status s, const char *fmt, ...) {
    char    msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_progress_clear(c);
    put_line(stderr, CLI_PROG ": error: ", msg);
    json_error(c, s, msg);
    return (int)s;
}

int cli_fail(cli_ctx *c, lq_status s, const lq_err *err) {
    const char *msg = (err && err->msg[0]) ? err->msg : lq_status_str(s);
    return cli_error(c, s, "%s", msg);
}

void cli_warn(cli_ctx *c, const char *fmt, ...) {
    if (c->quiet)
        return;
    char    msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cli_progress_clear(c);
    put_line(stderr, CLI_PROG ": warning: ", msg);
}

static void on_log(lq_log_level level, const char *msg, void *user) {
    cli_ctx *c = user;
    if (c->quiet || !msg)
        return;
    if (level >= LQ_LOG_WARN) {
        cli_warn(c, "%s", msg);
    } else if (c->verbose) {
        cli_progress_clear(c);
        put_line(stderr, CLI_PROG ": ", msg);
    }
}

static int term_width(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20)
        return ws.ws_col;
    const char *cols = getenv("COLUMNS");
    int         n    = cols ? atoi(cols) : 0;
    return n > 20 ? n : 80;
}

static void fmt_duration(double s, char *buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%lds", t);
    else if (t < 3600)
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

/* "layer 3/32 [=====>    ] 41% ETA 1m12s  model.layers.3" on one line, redrawn in place at
 * most ten times a second (and always for a new phase or the last step). */
static void draw(cli_ctx *c, const lq_progress *p) {
    const char *phase = p->phase ? p->phase : "working";
    double      t     = now_s();
    int         newph = strncmp(c->last_phase, phase, sizeof c->last_phase - 1) != 0;
    int         last  = p->total > 0 && p->step >= p->total;
    if (!newph && !last && c->line_shown && t - c->last_draw < 0.1)
        return;
    c->last_draw = t;
    snprintf(c->last_phase, sizeof c->last_phase, "%s", phase);

    char line[512], eta[32] = "";
    int  n;
    if (p->total > 0) {
        double frac = (double)p->step / (double)p->total;
        if (frac < 0)
            frac = 0;
        if (frac > 1)
            frac = 1;
        char bar[21];
        int  fill = (int)(frac * 20);
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        if (fill >= 20)
            bar[19] = '=';
        bar[20]    = 0;
        double rem = p->eta_s;
        if (rem < 0 && p->step > 0 && p->elapsed_s > 0)
            rem = p->elapsed_s * (double)(p->total - p->step) / (double)p->step;
        if (last) { /* finished: how long it took says more than "ETA 0s" */
            char d[24];
            fmt_duration(p->elapsed_s, d, sizeof d);
            snprintf(eta, sizeof eta, " in %s", d);
        } else if (rem >= 0) {
            char d[24];
            fmt_duration(rem, d, sizeof d);
            snprintf(eta, sizeof eta, " ETA %s", d);
        }
        n = snprintf(line, sizeof line, "%s %lld/%lld [%s] %3d%%%s  %s", phase,
                     (long long)p->step, (long long)p->total, bar, (int)(frac * 100 + 1e-9), eta,
                     p->detail ? p->detail : "");
    } else {
        char d[24];
        fmt_duration(p->elapsed_s, d, sizeof d);
        n = snprintf(line, sizeof line, "%s %lld (%s)  %s", phase, (long long)p->step, d,
                     p->detail ? p->detail : "");
    }
    int w = term_width() - 1; /* never wrap: a wrapped line cannot be redrawn with \r */
    if (n > w && w > 0 && w < (int)sizeof line)
        line[w] = 0;
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    c->line_shown = 1;
}

static int on_progress(const lq_progress *p, void *user) {
    cli_ctx *c = user;
    if (cli_interrupted())
        return 1;
    if (p && c->tty && !c->quiet)
        draw(c, p);
    return 0;
}

lq_callbacks cli_callbacks(cli_ctx *c) {
    lq_callbacks cb = {on_progress, on_log, c};
    return cb;
}

void cli_fmt_bytes(double b, char *buf, size_t cap) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int                      u      = 0;
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", b);
    else
        snprintf(buf, cap, "%.*f %s", b < 10 ? 2 : 1, b, unit[u]);
}

void cli_emit_report(cli_ctx *c, const char *json) {
    if (!json)
        return;
    if (c->json) {
        printf("%s\n", json);
        return;
    }
    if (c->quiet)
        return;
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return;
    }
    for (const cJSON *e = o->child; e; e = e->next) {
        if (cJSON_IsString(e))
            fprintf(c->human, "%s: %s\n", e->string, e->valuestring);
        else if (cJSON_IsNumber(e))
            fprintf(c->human, "%s: %.10g\n", e->string, e->valuedouble);
        else if (cJSON_IsBool(e))
            fprintf(c->human, "%s: %s\n", e->string, cJSON_IsTrue(e) ? "true" : "false");
        else if (cJSON_IsObject(e) && !strcmp(e->string, "ppl_check")) {
            const cJSON *a = cJSON_GetObjectItem(e, "ppl_original");
            const cJSON *b = cJSON_GetObjectItem(e, "ppl_quantized");
            const cJSON *i = cJSON_GetObjectItem(e, "increase_percent");
            const cJSON *d = cJSON_GetObjectItem(e, "data_file");
            if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && cJSON_IsNumber(i))
                fprintf(c->human, "ppl_check: %.4f -> %.4f (%+.2f%%) on %s\n", a->valuedouble,
                        b->valuedouble, i->valuedouble,
                        cJSON_IsString(d) ? d->valuestring : "?");
        }
    }
    cJSON_Delete(o);
}
