/* Command-line options derived from the options table: key group_size <-> --group-size,
 * booleans as --sym / --no-sym, only the rows whose `methods` list names the command. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* Flags every command accepts. */
typedef struct global_flag {
    const char *name;
    char        short_name;
    const char *help;
} global_flag;

static const global_flag k_globals[] = {
    {"quiet", 'q', "no progress line, no warnings"},
    {"json", 0, "print the JSON report on stdout (human output goes to stderr)"},
    {"verbose", 'v', "also print informational messages"},
    {"help", 'h', "show this help"},
};
#define N_GLOBALS ((int)(sizeof k_globals / sizeof k_globals[0]))

static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 99;
    int prev[65], cur[65];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j]  = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

const char *cli_suggest(const char *word, const char *const *cands, int n) {
    const char *best = NULL;
    int         bd   = 3;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(word, cands[i]);
        if (d < bd) {
            bd   = d;
            best = cands[i];
        }
    }
    return best;
}

static void dashes(const char *key, char *buf, size_t cap) {
    size_t i = 0;
    for (; key[i] && i + 1 < cap; i++)
        buf[i] = key[i] == '_' ? '-' : key[i];
    buf[i] = 0;
}

static void underscores(const char *flag, size_t len, char *buf, size_t cap) {
    size_t i = 0;
    for (; i < len && i + 1 < cap; i++)
        buf[i] = flag[i] == '-' ? '_' : flag[i];
    buf[i] = 0;
}

static int n_flags(const cli_cmd *cmd) {
    int n = 0;
    while (cmd->flags && cmd->flags[n].name)
        n++;
    return n;
}

static int applies(const cli_cmd *cmd, const lq_param_info *pi) {
    return cmd->params_key && lq_param_applies(pi, cmd->params_key);
}

/* Error for an unknown --name, with a suggestion from everything the command accepts. */
static int unknown_option(cli_ctx *c, const cli_cmd *cmd, const char *name) {
    const char *cands[256];
    char        store[256][48];
    int         n = 0;
    for (int i = 0; i < lq_param_count() && n < 200; i++) {
        const lq_param_info *pi = lq_param_get_info(i);
        if (!applies(cmd, pi))
            continue;
        dashes(pi->name, store[n], sizeof store[n]);
        cands[n] = store[n];
        n++;
    }
    for (int i = 0; i < n_flags(cmd) && n < 250; i++)
        cands[n++] = cmd->flags[i].name;
    for (int i = 0; i < N_GLOBALS; i++)
        cands[n++] = k_globals[i].name;
    const char *s = cli_suggest(name, cands, n);
    if (s)
        return cli_error(c, LQ_ERR_INVALID_ARG,
                         "unknown option --%s for %s (did you mean --%s? see llmquant %s --help)",
                         name, cmd->name, s, cmd->name);
    return cli_error(c, LQ_ERR_INVALID_ARG, "unknown option --%s for %s (see llmquant %s --help)",
                     name, cmd->name, cmd->name);
}

static int set_global(cli_ctx *c, const char *name, char short_name) {
    for (int i = 0; i < N_GLOBALS; i++) {
        const global_flag *g = &k_globals[i];
        if ((name && !strcmp(name, g->name)) || (short_name && short_name == g->short_name)) {
            if (!strcmp(g->name, "quiet"))
                c->quiet = 1;
            else if (!strcmp(g->name, "json"))
                c->json = 1;
            else if (!strcmp(g->name, "verbose"))
                c->verbose = 1;
            return 1; /* help is handled by the caller */
        }
    }
    return 0;
}

int cli_parse_args(cli_ctx *c, const cli_cmd *cmd, int argc, char **argv, cli_args *a,
                   int *want_help) {
    *want_help = 0;
    /* --help wins over any other problem on the line. */
    for (int i = 0; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *want_help = 1;
            return LQ_OK;
        }
    int nf = n_flags(cmd);
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (only_pos || arg[0] != '-' || !arg[1]) {
            if (a->npos >= CLI_MAX_POS)
                return cli_error(c, LQ_ERR_INVALID_ARG, "too many arguments");
            a->pos[a->npos++] = arg;
            continue;
        }
        if (!strcmp(arg, "--")) {
            only_pos = 1;
            continue;
        }
        if (arg[1] != '-') {
            /* Short flags: -q, -v, -o DIR, -oDIR. */
            char sn = arg[1];
            if (!arg[2] && set_global(c, NULL, sn))
                continue;
            int fi = -1;
            for (int j = 0; j < nf; j++)
                if (cmd->flags[j].short_name && cmd->flags[j].short_name == sn)
                    fi = j;
            if (fi < 0)
                return cli_error(c, LQ_ERR_INVALID_ARG, "unknown option %s for %s (see llmquant "
                                                        "%s --help)", arg, cmd->name, cmd->name);
            const cli_flag *f = &cmd->flags[fi];
            if (!f->metavar) {
                if (arg[2])
                    return cli_error(c, LQ_ERR_INVALID_ARG, "option -%c takes no value", sn);
                a->flag_val[fi] = "";
            } else if (arg[2]) {
                a->flag_val[fi] = arg + 2;
            } else if (i + 1 < argc) {
                a->flag_val[fi] = argv[++i];
            } else {
                return cli_error(c, LQ_ERR_INVALID_ARG, "option -%c needs a value (%s)", sn,
                                 f->metavar);
            }
            continue;
        }
        /* --name, --name=value, --name value, --no-name */
        const char *name = arg + 2;
        const char *eq   = strchr(name, '=');
        size_t      nl   = eq ? (size_t)(eq - name) : strlen(name);
        const char *val  = eq ? eq + 1 : NULL;
        char        nm[128];
        if (nl >= sizeof nm)
            return cli_error(c, LQ_ERR_INVALID_ARG, "option %.40s...: name too long", arg);
        memcpy(nm, name, nl);
        nm[nl] = 0;
        if (set_global(c, nm, 0)) {
            if (val)
                return cli_error(c, LQ_ERR_INVALID_ARG, "option --%s takes no value", nm);
            continue;
        }
        int fi = -1;
        for (int j = 0; j < nf; j++)
            if (!strcmp(cmd->flags[j].name, nm))
                fi = j;
        if (fi >= 0) {
            const cli_flag *f = &cmd->flags[fi];
            if (!f->metavar) {
                if (val)
                    return cli_error(c, LQ_ERR_INVALID_ARG, "option --%s takes no value", nm);
                a->flag_val[fi] = "";
            } else if (val) {
                a->flag_val[fi] = val;
            } else if (i + 1 < argc) {
                a->flag_val[fi] = argv[++i];
            } else {
                return cli_error(c, LQ_ERR_INVALID_ARG, "option --%s needs a value (%s)", nm,
                                 f->metavar);
            }
            continue;
        }
        /* Library option. */
        char key[128];
        underscores(nm, nl, key, sizeof key);
        const lq_param_info *pi      = lq_param_find(key);
        int                  negated = 0;
        if (!pi && !strncmp(key, "no_", 3)) {
            const lq_param_info *b = lq_param_find(key + 3);
            if (b && b->type == LQ_PT_BOOL) {
                pi      = b;
                negated = 1;
            }
        }
        if (!pi)
            return unknown_option(c, cmd, nm);
        if (!applies(cmd, pi)) {
            char cmds[256];
            lq_param_commands(pi, cmds, sizeof cmds);
            return cli_error(c, LQ_ERR_INVALID_ARG,
                             "option --%s does not apply to %s (applies to: %s)", nm, cmd->name,
                             cmds);
        }
        if (pi->type == LQ_PT_BOOL) {
            if (negated && val)
                return cli_error(c, LQ_ERR_INVALID_ARG, "option --%s takes no value", nm);
            if (!val)
                val = negated ? "false" : "true";
        } else if (!val) {
            if (i + 1 >= argc)
                return cli_error(c, LQ_ERR_INVALID_ARG, "option --%s needs a value", nm);
            val = argv[++i];
        }
        lq_err    err = {0};
        lq_status s   = lq_params_set(a->params, pi->name, val, &err);
        if (s != LQ_OK) {
            /* The library names the key ("option group_size: ..."); say it as typed here. */
            char   pre[160], flag[128];
            size_t pl = (size_t)snprintf(pre, sizeof pre, "option %s: ", pi->name);
            dashes(pi->name, flag, sizeof flag);
            if (!strncmp(err.msg, pre, pl))
                return cli_error(c, s, "option --%s: %s", flag, err.msg + pl);
            return cli_fail(c, s, &err);
        }
    }
    if (cmd->npos >= 0 && a->npos != cmd->npos) {
        if (a->npos < cmd->npos)
            return cli_error(c, LQ_ERR_INVALID_ARG, "%s: missing argument (usage: llmquant %s %s)",
                             cmd->name, cmd->name, cmd->usage);
        return cli_error(c, LQ_ERR_INVALID_ARG, "%s: unexpected argument \"%s\" (usage: llmquant "
                                                "%s %s)", cmd->name, a->pos[cmd->npos], cmd->name,
                         cmd->usage);
    }
    for (int j = 0; j < nf; j++)
        if (cmd->flags[j].required && !a->flag_val[j]) {
            const cli_flag *f = &cmd->flags[j];
            if (f->short_name)
                return cli_error(c, LQ_ERR_INVALID_ARG, "%s: missing -%c/--%s %s", cmd->name,
                                 f->short_name, f->name, f->metavar ? f->metavar : "");
            return cli_error(c, LQ_ERR_INVALID_ARG, "%s: missing --%s %s", cmd->name, f->name,
                             f->metavar ? f->metavar : "");
        }
    return LQ_OK;
}

/* ------------------------------------------------------------------------------------------ */
static const char *metavar_of(const lq_param_info *pi) {
    switch (pi->type) {
    case LQ_PT_INT:
        return "N";
    case LQ_PT_FLOAT:
        return "X";
    case LQ_PT_SIZE:
        return "SIZE";
    case LQ_PT_STR:
        if (pi->choices)
            return pi->choices;
        if (!strncmp(pi->help, "output format", 13))
            return "FORMAT";
        return (strstr(pi->help, "file") || strstr(pi->help, "text")) ? "FILE" : "VALUE";
    default:
        return "";
    }
}

static void print_row(FILE *f, const char *left, const char *help) {
    if (strlen(left) <= 26)
        fprintf(f, "  %-26s %s\n", left, help);
    else
        fprintf(f, "  %s\n  %-26s %s\n", left, "", help);
}

static void print_param(FILE *f, const lq_param_info *pi) {
    char d[64], left[160], help[512];
    dashes(pi->name, d, sizeof d);
    if (pi->type == LQ_PT_BOOL)
        snprintf(left, sizeof left, "--%s, --no-%s", d, d);
    else
        snprintf(left, sizeof left, "--%s %s", d, metavar_of(pi));
    int n = snprintf(help, sizeof help, "%s", pi->help);
    if (pi->def && *pi->def)
        n += snprintf(help + n, sizeof help - (size_t)n, " [default: %s", pi->def);
    else
        n += snprintf(help + n, sizeof help - (size_t)n, " [default: unset");
    if (pi->type == LQ_PT_INT)
        n += snprintf(help + n, sizeof help - (size_t)n, "; %.0f..%.0f", pi->min, pi->max);
    else if (pi->type == LQ_PT_FLOAT)
        n += snprintf(help + n, sizeof help - (size_t)n, "; %g..%g", pi->min, pi->max);
    snprintf(help + n, sizeof help - (size_t)n, "]");
    print_row(f, left, help);
}

void cli_print_cmd_help(const cli_cmd *cmd, FILE *f) {
    fprintf(f, "usage: llmquant %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
    int nf = n_flags(cmd);
    if (nf) {
        fprintf(f, "\nArguments:\n");
        for (int j = 0; j < nf; j++) {
            const cli_flag *fl = &cmd->flags[j];
            char            left[128], help[512];
            if (fl->short_name)
                snprintf(left, sizeof left, "-%c, --%s%s%s", fl->short_name, fl->name,
                         fl->metavar ? " " : "", fl->metavar ? fl->metavar : "");
            else
                snprintf(left, sizeof left, "--%s%s%s", fl->name, fl->metavar ? " " : "",
                         fl->metavar ? fl->metavar : "");
            snprintf(help, sizeof help, "%s%s", fl->help, fl->required ? " (required)" : "");
            print_row(f, left, help);
        }
    }
    /* Command-specific rows first, then those every command shares ("*"). */
    for (int pass = 0; pass < 2; pass++) {
        int shown = 0;
        for (int i = 0; i < lq_param_count(); i++) {
            const lq_param_info *pi  = lq_param_get_info(i);
            int                  any = !strcmp(pi->families, "*");
            if (!applies(cmd, pi) || any != pass)
                continue;
            if (!shown++)
                fprintf(f, pass ? "\nCommon options:\n" : "\nOptions:\n");
            print_param(f, pi);
        }
    }
    fprintf(f, "\nGlobal flags:\n");
    for (int i = 0; i < N_GLOBALS; i++) {
        char left[64];
        if (k_globals[i].short_name)
            snprintf(left, sizeof left, "-%c, --%s", k_globals[i].short_name, k_globals[i].name);
        else
            snprintf(left, sizeof left, "--%s", k_globals[i].name);
        print_row(f, left, k_globals[i].help);
    }
    fprintf(f, "\nOptions take --name VALUE or --name=VALUE. The exit code is the lq_status "
               "value\n(0 = success; `llmquant exit-codes` lists them).\n");
}
