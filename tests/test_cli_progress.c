/* The CLI's progress line, log callback and SIGINT cancellation, driven through the lq_callbacks
 * the CLI hands to the library (cli/cli_out.c is compiled into this test; stderr goes to a file
 * so the exact bytes a terminal would receive can be checked). */
#include "../cli/cli_out.c"

#include "lq_test.h"

#include <sys/stat.h>

static char g_path[4096];

static char *slurp(void) {
    fflush(stderr);
    FILE *f = fopen(g_path, "rb");
    if (!f)
        return calloc(1, 1);
    char  *buf = calloc(1, 1 << 16);
    size_t n   = fread(buf, 1, (1 << 16) - 1, f);
    buf[n]     = 0;
    fclose(f);
    return buf;
}

/* stderr is the file under test, so CHECK messages land there too: echo them to stdout before
 * the file is truncated. */
static void reset(void) {
    char *prev = slurp();
    for (char *l = strstr(prev, "CHECK failed"); l; l = strstr(l + 1, "CHECK failed")) {
        char *nl = strchr(l, '\n');
        printf("%.*s\n", nl ? (int)(nl - l) : (int)strlen(l), l);
    }
    free(prev);
    if (!freopen(g_path, "w", stderr))
        exit(1);
}

int main(void) {
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    mkdir(tmp, 0777);
    snprintf(g_path, sizeof g_path, "%s/cli_progress_stderr.txt", tmp);
    setenv("COLUMNS", "200", 1);
    reset();

    cli_ctx      c  = {0};
    c.tty           = 1;
    lq_callbacks cb = cli_callbacks(&c);
    CHECK(cb.progress && cb.log && cb.user == &c);

    /* 13 of 32 layers, library ETA given: one line redrawn with \r, cleared to end of line */
    lq_progress p = {"layer", 13, 32, 30.0, 72.0, "model.layers.12"};
    CHECK_EQ_INT(cb.progress(&p, cb.user), 0);
    char *out = slurp();
    CHECK_MSG(!strcmp(out, "\rlayer 13/32 [========>           ]  40% ETA 1m12s  model.layers.12"
                           "\033[K"),
              "got \"%s\"", out);
    free(out);

    /* redraws are throttled to 10/s within a phase, but the last step always shows */
    reset();
    p.step = 14;
    CHECK_EQ_INT(cb.progress(&p, cb.user), 0);
    out = slurp();
    CHECK_MSG(out[0] == 0, "throttled redraw printed \"%s\"", out);
    free(out);
    p.step = 32, p.eta_s = -1, p.elapsed_s = 3725, p.detail = "done";
    CHECK_EQ_INT(cb.progress(&p, cb.user), 0);
    out = slurp();
    CHECK_MSG(strstr(out, "layer 32/32 [====================] 100% in 1h02m  done") != NULL, "got \"%s\"",
              out);
    free(out);

    /* a new phase redraws at once; no library ETA: derived from elapsed time (10 s per step) */
    reset();
    lq_progress q = {"calibrate", 2, 8, 20.0, -1, "sample 2"};
    CHECK_EQ_INT(cb.progress(&q, cb.user), 0);
    out = slurp();
    CHECK_MSG(strstr(out, "calibrate 2/8 [=====>              ]  25% ETA 1m00s  sample 2"),
              "got \"%s\"", out);
    free(out);
    /* unknown total: step count and elapsed time */
    reset();
    lq_progress u = {"write", 5, 0, 3725.0, -1, "shard 1"};
    CHECK_EQ_INT(cb.progress(&u, cb.user), 0);
    out = slurp();
    CHECK_MSG(strstr(out, "\rwrite 5 (1h02m)  shard 1") != NULL, "got \"%s\"", out);
    free(out);

    /* a log line first clears the progress line; warnings always, info only with --verbose */
    reset();
    cb.log(LQ_LOG_INFO, "quiet info", cb.user);
    cb.log(LQ_LOG_WARN, "model.layers.3.mlp.down_proj: Cholesky retried with damp 0.02",
           cb.user);
    out = slurp();
    CHECK_MSG(!strcmp(out, "\r\033[Kllmquant: warning: model.layers.3.mlp.down_proj: Cholesky "
                           "retried with damp 0.02\n"),
              "got \"%s\"", out);
    free(out);
    reset();
    c.verbose = 1;
    cb.log(LQ_LOG_INFO, "two\nlines", cb.user);
    out = slurp();
    CHECK_MSG(!strcmp(out, "llmquant: two lines\n"), "got \"%s\"", out);
    free(out);

    /* narrow terminal: the line is cut, never wrapped */
    reset();
    setenv("COLUMNS", "30", 1);
    lq_progress w = {"layer", 1, 4, 1.0, 3.0, "model.layers.0.self_attn.q_proj"};
    c.last_phase[0] = 0;
    CHECK_EQ_INT(cb.progress(&w, cb.user), 0);
    out = slurp();
    CHECK_MSG(strlen(out) == 1 + 29 + 3, "line of %zu bytes: \"%s\"", strlen(out), out);
    free(out);

    /* --quiet: nothing drawn, nothing logged */
    reset();
    c.quiet = 1;
    c.last_phase[0] = 0;
    CHECK_EQ_INT(cb.progress(&w, cb.user), 0);
    cb.log(LQ_LOG_WARN, "hidden", cb.user);
    out = slurp();
    CHECK_MSG(out[0] == 0, "got \"%s\"", out);
    free(out);

    /* not a terminal (logs): plain lines -- one per layer, per new phase and at the end, else
     * at most one every 30 s; no carriage returns or escape sequences */
    reset();
    c.quiet = 0, c.tty = 0;
    c.last_phase[0] = 0;
    CHECK_EQ_INT(cb.progress(&w, cb.user), 0); /* layer 1/4 */
    CHECK_EQ_INT(cb.progress(&w, cb.user), 0); /* the same layer again: nothing */
    lq_progress w2 = {"layer", 2, 4, 2.0, 2.0, "model.layers.1"};
    CHECK_EQ_INT(cb.progress(&w2, cb.user), 0);
    lq_progress pp = {"ppl", 5, 100, 2.5, -1, ""};
    CHECK_EQ_INT(cb.progress(&pp, cb.user), 0); /* new phase */
    pp.step = 6;
    CHECK_EQ_INT(cb.progress(&pp, cb.user), 0); /* same phase within 30 s: nothing */
    pp.step = 100;
    CHECK_EQ_INT(cb.progress(&pp, cb.user), 0); /* the last step */
    out = slurp();
    CHECK_MSG(!strcmp(out, "llmquant: layer 1/4 (25%), elapsed 1s, ETA 3s  "
                           "model.layers.0.self_attn.q_proj\n"
                           "llmquant: layer 2/4 (50%), elapsed 2s, ETA 2s  model.layers.1\n"
                           "llmquant: ppl 5/100 (5%), elapsed 3s, ETA 48s\n"
                           "llmquant: ppl 100/100 (100%), elapsed 3s\n"),
              "got \"%s\"", strchr(out, '\n') ? strchr(out, '\n') + 1 : out);
    free(out);

    /* SIGINT during a job: the next progress callback asks the library to cancel */
    cli_signals_install("model", NULL);
    CHECK_EQ_INT(cli_interrupted(), 0);
    raise(SIGINT);
    CHECK_EQ_INT(cli_interrupted(), 1);
    CHECK_EQ_INT(cb.progress(&w, cb.user), 1);
    cli_signals_restore();

    /* error lines: one line, prefixed; --json adds the JSON object on stdout */
    reset();
    c.tty = 1, c.line_shown = 1;
    int rc = cli_error(&c, LQ_ERR_NOT_FOUND, "%s: no such directory", "/models/x");
    CHECK_EQ_INT(rc, LQ_ERR_NOT_FOUND);
    out = slurp();
    CHECK_MSG(!strcmp(out, "\r\033[Kllmquant: error: /models/x: no such directory\n"),
              "got \"%s\"", out);
    free(out);

    char b[32];
    cli_fmt_bytes(512, b, sizeof b);
    CHECK(!strcmp(b, "512 B"));
    cli_fmt_bytes(1536, b, sizeof b);
    CHECK(!strcmp(b, "1.50 KiB"));
    cli_fmt_bytes(5.0 * (1 << 30), b, sizeof b);
    CHECK(!strcmp(b, "5.00 GiB"));
    cli_fmt_bytes(520064, b, sizeof b);
    CHECK(!strcmp(b, "507.9 KiB"));

    reset();
    if (!freopen("/dev/null", "w", stderr))
        return 1;
    if (lq_test_failures_)
        printf("cli_progress: %d of %d checks FAILED\n", lq_test_failures_, lq_test_checks_);
    return lq_test_end("cli_progress");
}
