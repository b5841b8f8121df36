/* Options: the string table (lq_options.def) the CLI and the job API validate against, and the
 * one parse of a validated set into the typed lq_opts the library reads. */
#include "lq_base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lq_opts.h"

static const lq_param_info k_params[] = {
#define LQ_OPT(name, type, def, lo, hi, families, choices, help)                                  \
    {#name, LQ_PT_##type, def, lo, hi, families, choices, help},
#include "lq_options.def"
#undef LQ_OPT
};

#define N_PARAMS ((int)(sizeof k_params / sizeof k_params[0]))

int lq_param_count(void) {
    return N_PARAMS;
}

const lq_param_info *lq_param_get_info(int i) {
    return (i >= 0 && i < N_PARAMS) ? &k_params[i] : NULL;
}

static int param_index(const char *name) {
    for (int i = 0; i < N_PARAMS; i++)
        if (strcmp(k_params[i].name, name) == 0)
            return i;
    return -1;
}

const lq_param_info *lq_param_find(const char *name) {
    int i = name ? param_index(name) : -1;
    return i < 0 ? NULL : &k_params[i];
}

struct lq_params {
    char *val[N_PARAMS]; /* NULL = unset (default applies) */
};

lq_params *lq_params_create(void) {
    return calloc(1, sizeof(lq_params));
}

void lq_params_free(lq_params *p) {
    if (!p)
        return;
    for (int i = 0; i < N_PARAMS; i++)
        free(p->val[i]);
    free(p);
}

/* Parses "512", "1.5G", "64MiB" as bytes. */
static int parse_size(const char *s, double *out) {
    char  *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return 0;
    while (*end == ' ')
        end++;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 0:
        break;
    case 'B':
        if (end[1])
            return 0;
        *out = v;
        return 1;
    case 'K':
        mul = 1024.0;
        break;
    case 'M':
        mul = 1024.0 * 1024;
        break;
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        break;
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        return 0;
    }
    if (*end) {
        end++;
        if (strcmp(end, "") != 0 && strcasecmp(end, "B") != 0 && strcasecmp(end, "iB") != 0)
            return 0;
    }
    *out = v * mul;
    return 1;
}

static int parse_bool(const char *s, int *out) {
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *out = 1;
    else if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "off"))
        *out = 0;
    else
        return 0;
    return 1;
}

static int in_choices(const char *choices, const char *v) {
    size_t vl = strlen(v);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t      cl  = bar ? (size_t)(bar - c) : strlen(c);
        if (cl == vl && strncmp(c, v, vl) == 0)
            return 1;
        if (!bar)
            break;
        c = bar + 1;
    }
    return 0;
}

lq_status lq_params_set(lq_params *p, const char *name, const char *value, lq_err *err) {
    if (!p || !name || !value)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_params_set: NULL argument");
    int i = param_index(name);
    if (i < 0)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "unknown option \"%s\"", name);
    const lq_param_info *pi = &k_params[i];
    double               v  = 0;
    char                *end;
    int                  b;
    switch (pi->type) {
    case LQ_PT_INT:
        errno = 0;
        v     = (double)strtoll(value, &end, 10);
        if (errno || end == value || *end)
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not an integer", name,
                           value);
        break;
    case LQ_PT_FLOAT:
        v = strtod(value, &end);
        if (end == value || *end || !isfinite(v))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not a number", name,
                           value);
        break;
    case LQ_PT_BOOL:
        if (!parse_bool(value, &b))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not true/false", name,
                           value);
        break;
    case LQ_PT_SIZE:
        if (!parse_size(value, &v))
            return lq_fail(err, LQ_ERR_INVALID_ARG,
                           "option %s: \"%s\" is not a size (e.g. 512M, 8G)", name, value);
        break;
    default:
        if (pi->choices && !in_choices(pi->choices, value))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: \"%s\" is not one of %s", name,
                           value, pi->choices);
        break;
    }
    if ((pi->type == LQ_PT_INT || pi->type == LQ_PT_FLOAT || pi->type == LQ_PT_SIZE) &&
        (v < pi->min || v > pi->max))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s: %s is outside [%g, %g]", name, value,
                       pi->min, pi->max);
    char *copy = strdup(value);
    if (!copy)
        return lq_fail(err, LQ_ERR_NOMEM, "out of memory");
    free(p->val[i]);
    p->val[i] = copy;
    return LQ_OK;
}

const char *lq_params_get(const lq_params *p, const char *name) {
    int i = name ? param_index(name) : -1;
    if (i < 0)
        return NULL;
    if (p && p->val[i])
        return p->val[i];
    return k_params[i].def;
}

static int64_t get_i64(const lq_params *p, int i) {
    const char *v = p && p->val[i] ? p->val[i] : k_params[i].def;
    double      d = 0;
    switch (k_params[i].type) {
    case LQ_PT_SIZE:
        return (*v && parse_size(v, &d)) ? (int64_t)d : 0;
    default:
        return *v ? (int64_t)strtoll(v, NULL, 10) : 0;
    }
}

static double get_f64(const lq_params *p, int i) {
    const char *v = p && p->val[i] ? p->val[i] : k_params[i].def;
    return *v ? strtod(v, NULL) : 0.0;
}

static int get_bool(const lq_params *p, int i) {
    const char *v = p && p->val[i] ? p->val[i] : k_params[i].def;
    int         b = 0;
    return parse_bool(v, &b) ? b : 0;
}

static const char *get_str(const lq_params *p, int i) {
    return p && p->val[i] ? p->val[i] : k_params[i].def;
}

/* Row order of lq_options.def = index in k_params. */
enum {
#define LQ_OPT(name, ...) OPT_##name,
#include "lq_options.def"
#undef LQ_OPT
    OPT_COUNT_
};
_Static_assert(OPT_COUNT_ == N_PARAMS, "one k_params row per option");

#define get_INT   get_i64
#define get_SIZE  get_i64
#define get_FLOAT get_f64
#define get_BOOL  get_bool
#define get_STR   get_str

void lq_opts_read(const lq_params *p, lq_opts *o) {
    memset(o, 0, sizeof *o);
#define LQ_OPT(name, type, ...)                                                                    \
    o->name     = get_##type(p, OPT_##name);                                                       \
    o->set.name = p && p->val[OPT_##name] != NULL;
#include "lq_options.def"
#undef LQ_OPT
}

int lq_params_given(const lq_params *p, int i) {
    return p && i >= 0 && i < N_PARAMS && p->val[i] != NULL;
}
