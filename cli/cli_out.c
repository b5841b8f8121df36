/* Output of the CLI: one-line errors and warnings, the TTY progress line, SIGINT, reports. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <limits.h>
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

/* SIGBUS: a mapped input (safetensors, GGUF) shrank under us (truncated, a network file system
 * dropped it, a failing disk). Nothing in the library can recover from a fault in the middle of
 * a kernel, so the handler prints the error and re-executes this program (execv is
 * async-signal-safe and keeps the pid) as "llmquant __discard-output OUT", which removes the
 * run's temporary directory and lock and exits LQ_ERR_IO. Written before the handler is armed,
 * read only by it. */
static char g_bus_msg[PATH_MAX + 256];
static char g_bus_exe[PATH_MAX];
static char g_bus_out[PATH_MAX];

static void on_sigbus(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, g_bus_msg, strlen(g_bus_msg));
    (void)w;
    if (g_bus_exe[0] && g_bus_out[0]) {
        char *const argv[] = {"llmquant", "__discard-output", g_bus_out, NULL};
        execv(g_bus_exe, argv);
    }
    _exit(LQ_ERR_IO);
}

void cli_signals_install(const char *model, const char *out) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    snprintf(g_bus_msg, sizeof g_bus_msg,
             "llmquant: error: %.*s: a mapped input file was truncated or became unreadable "
             "during the run (SIGBUS); nothing was written\n",
             PATH_MAX, model ? model : "input");
    g_bus_out[0]             = 0;
    ssize_t n                = readlink("/proc/self/exe", g_bus_exe, sizeof g_bus_exe - 1);
    g_bus_exe[n > 0 ? n : 0] = 0;
    if (out && strlen(out) < sizeof g_bus_out)
        strcpy(g_bus_out, out);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);
}

void cli_signals_restore(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
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
        n = snprintf(line, sizeof line, "%s %lld/%lld [%s] %3d%%%s  %s", phase, (long long)p->step,
                     (long long)p->total, bar, (int)(frac * 100 + 1e-9), eta,
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

/* Logs (stderr not a terminal: Slurm, nohup, CI): a plain line at each new phase, each new
 * layer, the last step and otherwise at most every 30 s -- never a redrawn line. */
static void log_line(cli_ctx *c, const lq_progress *p) {
    const char  *phase = p->phase ? p->phase : "working";
    const double t     = now_s();
    const int    newph = strncmp(c->last_phase, phase, sizeof c->last_phase - 1) != 0;
    const int    last  = p->total > 0 && p->step >= p->total;
    const int    layer = !strcmp(phase, "layer") && p->step != c->last_step;
    if (!newph && !last && !layer && t - c->last_draw < 30)
        return;
    if (!newph && last && c->last_step == p->step)
        return;
    c->last_draw = t;
    c->last_step = p->step;
    snprintf(c->last_phase, sizeof c->last_phase, "%s", phase);
    char el[24], eta[40] = "";
    fmt_duration(p->elapsed_s, el, sizeof el);
    double rem = p->eta_s;
    if (rem < 0 && p->step > 0 && p->total > 0 && p->elapsed_s > 0)
        rem = p->elapsed_s * (double)(p->total - p->step) / (double)p->step;
    if (!last && rem >= 0 && p->step > 0) {
        char d[24];
        fmt_duration(rem, d, sizeof d);
        snprintf(eta, sizeof eta, ", ETA %s", d);
    }
    if (p->total > 0)
        fprintf(stderr, CLI_PROG ": %s %lld/%lld (%d%%), elapsed %s%s%s%s\n", phase,
                (long long)p->step, (long long)p->total,
                (int)(100.0 * (double)p->step / (double)p->total + 1e-9), el, eta,
                p->detail && *p->detail ? "  " : "", p->detail ? p->detail : "");
    else
        fprintf(stderr, CLI_PROG ": %s %lld, elapsed %s%s%s\n", phase, (long long)p->step, el,
                p->detail && *p->detail ? "  " : "", p->detail ? p->detail : "");
    fflush(stderr);
}

static int on_progress(const lq_progress *p, void *user) {
    cli_ctx *c = user;
    if (cli_interrupted())
        return 1;
    if (!p || c->quiet)
        return 0;
    if (c->tty)
        draw(c, p);
    else
        log_line(c, p);
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

/* ---------------------------------------------------------------------------------------- */
/* Human summaries: one aligned "label  value" table per command; with -q only the line the   */
/* command exists for.                                                                         */
/* ---------------------------------------------------------------------------------------- */
static const cJSON *jget(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}
double cli_jnum(const cJSON *o, const char *k) {
    const cJSON *v = jget(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}
const char *cli_jstr(const cJSON *o, const char *k) {
    const cJSON *v = jget(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void row(cli_ctx *c, const char *label, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void row(cli_ctx *c, const char *label, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->human, "%-12s", label);
    vfprintf(c->human, fmt, ap);
    fputc('\n', c->human);
    va_end(ap);
}

static void ppl_check_row(cli_ctx *c, const cJSON *pc) {
    if (!cJSON_IsObject(pc))
        return;
    row(c, "ppl check", "%.4f -> %.4f (%+.2f%%) on %s%s", cli_jnum(pc, "ppl_original"),
        cli_jnum(pc, "ppl_quantized"), cli_jnum(pc, "increase_percent"), cli_jstr(pc, "data_file"),
        cJSON_IsFalse(jget(pc, "passed")) ? "  OVER THE BOUND" : "");
}

static void summary_gguf(cli_ctx *c, const cJSON *o) {
    char b1[32], b2[32], d[24];
    if (c->quiet) {
        fprintf(c->human, "wrote %s (%s, GGUF %s)\n", cli_jstr(o, "output"), cli_jstr(o, "method"),
                cli_jstr(o, "gguf_type"));
        return;
    }
    char         types[512] = "";
    size_t       n          = 0;
    const cJSON *ty         = jget(o, "tensor_types");
    for (const cJSON *e = ty ? ty->child : NULL; e && n < sizeof types; e = e->next)
        n += (size_t)snprintf(types + n, sizeof types - n, "%s%s %.0f", n ? ", " : "", e->string,
                              e->valuedouble);
    row(c, "method", "%s -> GGUF %s (llama-quantize's mix)", cli_jstr(o, "method"),
        cli_jstr(o, "gguf_type"));
    row(c, "model", "%s", cli_jstr(o, "model"));
    row(c, "tensors", "%.0f: %s", cli_jnum(o, "tensors"), types);
    if (jget(o, "calib")) {
        row(c, "  from gptq", "%.0f linears rounded on their type's grid",
            cli_jnum(o, "tensors_from_method"));
        row(c, "calibration", "%s, %.0f x %.0f tokens", cli_jstr(o, "calib"),
            cli_jnum(o, "nsamples"), cli_jnum(o, "seqlen"));
    }
    if (cli_jnum(o, "fallback_tensors") > 0)
        row(c, "  fallback", "%.0f (rows not a whole number of the type's blocks)",
            cli_jnum(o, "fallback_tensors"));
    fmt_duration(cli_jnum(o, "seconds"), d, sizeof d);
    cli_fmt_bytes(cli_jnum(o, "peak_rss_bytes"), b1, sizeof b1);
    cli_fmt_bytes(cli_jnum(o, "output_bytes"), b2, sizeof b2);
    row(c, "time", "%s, peak RSS %s", d, b1);
    row(c, "output", "%s (%s)", cli_jstr(o, "output"), b2);
}

static void summary_quantize(cli_ctx *c, const cJSON *o) {
    char         b1[32], b2[32], d[24];
    if (!strcmp(cli_jstr(o, "format"), "gguf")) {
        summary_gguf(c, o);
        return;
    }
    const double q = cli_jnum(o, "quantized_linears"), u = cli_jnum(o, "unquantized_linears");
    if (c->quiet) {
        fprintf(c->human, "wrote %s (%s, %.0f of %.0f linears quantized)\n", cli_jstr(o, "out_dir"),
                cli_jstr(o, "method"), q, q + u);
        return;
    }
    const char *m = cli_jstr(o, "method");
    if (!strcmp(m, "nf4") || !strcmp(m, "int8"))
        row(c, "method", "%s -> %s checkpoint", m, cli_jstr(o, "checkpoint"));
    else
        row(c, "method", "%s -> %s checkpoint, %.0f-bit, group %.0f", m, cli_jstr(o, "checkpoint"),
            cli_jnum(o, "bits"), cli_jnum(o, "group_size"));
    row(c, "model", "%s (%.0f layers)", cli_jstr(o, "model_dir"), cli_jnum(o, "layers"));
    row(c, "linears", "%.0f of %.0f quantized", q, q + u);
    const cJSON *why = jget(o, "unquantized_reasons");
    for (const cJSON *e = why ? why->child : NULL; e; e = e->next)
        row(c, "  kept", "%s: %s", e->string, cJSON_IsString(e) ? e->valuestring : "");
    if (jget(o, "calib"))
        row(c, "calibration", "%s, %.0f x %.0f tokens", cli_jstr(o, "calib"),
            cli_jnum(o, "nsamples"), cli_jnum(o, "seqlen"));
    fmt_duration(cli_jnum(o, "seconds"), d, sizeof d);
    cli_fmt_bytes(cli_jnum(o, "peak_rss_bytes"), b1, sizeof b1);
    cli_fmt_bytes(cli_jnum(o, "output_bytes"), b2, sizeof b2);
    if (jget(o, "gpu_peak_bytes")) {
        char b3[32];
        cli_fmt_bytes(cli_jnum(o, "gpu_peak_bytes"), b3, sizeof b3);
        row(c, "time", "%s on %s, peak RSS %s, peak device memory %s", d, cli_jstr(o, "device"),
            b1, b3);
    } else {
        row(c, "time", "%s on %s, peak RSS %s", d, cli_jstr(o, "device"), b1);
    }
    ppl_check_row(c, jget(o, "ppl_check"));
    row(c, "output", "%s (%s)", cli_jstr(o, "out_dir"), b2);
}

static void summary_ppl(cli_ctx *c, const cJSON *o) {
    if (c->quiet) {
        fprintf(c->human, "ppl %.4f\n", cli_jnum(o, "ppl"));
        return;
    }
    char b[32];
    row(c, "perplexity", "%.4f (mean NLL %.4f nats)", cli_jnum(o, "ppl"), cli_jnum(o, "nll"));
    row(c, "protocol", "%s, ctx %.0f, %.0f windows, %.0f of %.0f tokens scored",
        cli_jstr(o, "protocol"), cli_jnum(o, "ctx"), cli_jnum(o, "windows"),
        cli_jnum(o, "tokens_scored"), cli_jnum(o, "tokens"));
    row(c, "model", "%s (%s)", cli_jstr(o, "model_dir"), cli_jstr(o, "format"));
    row(c, "data", "%s", cli_jstr(o, "data_file"));
    const cJSON *et = jget(o, "expert_tokens");
    if (et)
        row(c, "experts",
            "tokens per expert %.0f (layer %.0f expert %.0f) to %.0f; %.0f of %.0f "
            "layer experts never chosen",
            cli_jnum(et, "min"), cli_jnum(et, "min_layer"), cli_jnum(et, "min_expert"),
            cli_jnum(et, "max"), cli_jnum(et, "unused"), cli_jnum(et, "experts"));
    cli_fmt_bytes(cli_jnum(o, "peak_rss_bytes"), b, sizeof b);
    row(c, "speed", "%.0f tokens/s on %s (%.1f s, load %.1f s), peak RSS %s",
        cli_jnum(o, "tokens_per_second"), cli_jstr(o, "device"), cli_jnum(o, "seconds"),
        cli_jnum(o, "load_seconds"), b);
}

static void summary_convert(cli_ctx *c, const cJSON *o) {
    if (c->quiet) {
        fprintf(c->human, "wrote %s\n", cli_jstr(o, "out_dir"));
        return;
    }
    char b[32], d[24];
    row(c, "converted", "%s (%s, %s) -> %s", cli_jstr(o, "model"), cli_jstr(o, "source_format"),
        cli_jstr(o, "model_type"), cli_jstr(o, "out_dir"));
    row(c, "tensors", "%.0f, stored as %s", cli_jnum(o, "tensors"), cli_jstr(o, "out_dtype"));
    fmt_duration(cli_jnum(o, "seconds"), d, sizeof d);
    cli_fmt_bytes(cli_jnum(o, "peak_rss_bytes"), b, sizeof b);
    row(c, "time", "%s, peak RSS %s", d, b);
}

void cli_emit_report(cli_ctx *c, const char *json) {
    if (!json)
        return;
    if (c->json) {
        printf("%s\n", json);
        return;
    }
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return;
    }
    if (jget(o, "ppl") && !jget(o, "method"))
        summary_ppl(c, o);
    else if (!strcmp(cli_jstr(o, "command"), "convert"))
        summary_convert(c, o);
    else
        summary_quantize(c, o);
    cJSON_Delete(o);
}

int cli_finish_job(cli_ctx *c, lq_status s, char *report, const lq_err *err) {
    cli_progress_clear(c);
    if (s == LQ_OK || !c->quiet)
        cli_emit_report(c, report);
    lq_free(report);
    return s == LQ_OK ? 0 : cli_fail(c, s, err);
}
