/* cli.h -- internals of the llmquant command-line program (the only code that prints or exits).
 * Uses the public API (llmquant.h) only, plus cJSON to render the library's JSON reports. */
#ifndef LQ_CLI_H
#define LQ_CLI_H

#include "llmquant.h"

#include <cjson/cJSON.h>

#include <stdio.h>

#define CLI_PROG      "llmquant"
#define CLI_MAX_FLAGS 8
#define CLI_MAX_POS   16

/* A command-specific flag that is not a library option (e.g. -o OUT_DIR, --data FILE). */
typedef struct cli_flag {
    const char *name;       /* long name without dashes */
    char        short_name; /* 0: none */
    const char *metavar;    /* NULL: a switch without value */
    int         required;
    const char *help;
} cli_flag;

typedef struct cli_args {
    lq_params  *params; /* library options from the options table */
    const char *pos[CLI_MAX_POS];
    int         npos;
    const char *flag_val[CLI_MAX_FLAGS]; /* value ("" for a given switch) or NULL */
} cli_args;

typedef struct cli_ctx {
    const char *cmd; /* command being run */
    int         quiet, json, verbose;
    FILE       *human; /* human-readable results: stdout, or stderr with --json */
    int         tty;   /* stderr is a terminal: draw the progress line */
    /* progress line state */
    int     line_shown;
    double  last_draw;
    char    last_phase[32];
    int64_t last_step; /* log lines: the step last printed */
} cli_ctx;

typedef struct cli_cmd cli_cmd;
struct cli_cmd {
    const char     *name;
    const char     *params_key; /* name in the options table's `methods` lists; NULL: none */
    const char     *usage;      /* after "llmquant NAME " */
    const char     *summary;
    int             npos;       /* positional arguments required; -1: any number */
    const cli_flag *flags;      /* command flags, terminated by a {NULL} row; may be NULL */
    int (*run)(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
};

/* Output helpers (cli_out.c). */
int  cli_error(cli_ctx *c, lq_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Report a library failure: "llmquant: error: <err.msg>" and return its code. */
int  cli_fail(cli_ctx *c, lq_status s, const lq_err *err);
void cli_warn(cli_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Callbacks that draw the progress line, print log messages and honour SIGINT. */
lq_callbacks cli_callbacks(cli_ctx *c);
void         cli_progress_clear(cli_ctx *c);
/* SIGINT/SIGTERM while a job runs: the first asks the library to cancel (through the progress
 * callback), the second kills the process. */
/* SIGINT/SIGTERM cancel the job; SIGBUS (a mapped input truncated) ends it cleanly, removing
 * the temporary output of out (may be NULL). */
void cli_signals_install(const char *model, const char *out);
void cli_signals_restore(void);
int  cli_interrupted(void);
/* Emit a library JSON report: verbatim on stdout with --json; else a table on c->human (with
 * --quiet, the one line of the result: "ppl 20.38", "wrote DIR ..."). */
void cli_emit_report(cli_ctx *c, const char *json);
/* After a job: clear the progress line, show the report (see cli_emit_report), free it, turn
 * the status into the exit code (printing the error line). The report is shown on failure too
 * (LQ_ERR_PPL_BOUND comes with one), except under -q where the error line is the result. */
int cli_finish_job(cli_ctx *c, lq_status s, char *report, const lq_err *err);
/* Fields of a JSON report: number (0 when absent), string ("" when absent). */
double      cli_jnum(const cJSON *o, const char *key);
const char *cli_jstr(const cJSON *o, const char *key);
/* "1.5 MiB" */
void cli_fmt_bytes(double b, char *buf, size_t cap);

/* Option parsing and help (cli_opts.c). Returns LQ_OK or an error already printed. */
int  cli_parse_args(cli_ctx *c, const cli_cmd *cmd, int argc, char **argv, cli_args *a,
                    int *want_help);
void cli_print_cmd_help(const cli_cmd *cmd, FILE *f);
/* Closest candidate within edit distance 2, or NULL. */
const char *cli_suggest(const char *word, const char *const *cands, int n);

/* Commands (cmd_*.c). */
int cmd_quantize(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
int cmd_convert(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
int cmd_ppl(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
int cmd_inspect(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
int cmd_batch(cli_ctx *c, const cli_cmd *cmd, cli_args *a);
int cmd_exit_codes(cli_ctx *c, const cli_cmd *cmd, cli_args *a);

extern const cli_flag cli_quantize_flags[];
extern const cli_flag cli_convert_flags[];
extern const cli_flag cli_ppl_flags[];
extern const cli_flag cli_inspect_flags[];
extern const cli_flag cli_batch_flags[];

#endif
