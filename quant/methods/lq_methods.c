/* The one table of methods. Adding a method: one lq_method_<name>.c + one row here. */
#include "lq_methods.h"

#include <stdio.h>
#include <string.h>

static const lq_method_traits *const k_methods[] = {
    &lq_method_rtn, &lq_method_gptq, &lq_method_awq, &lq_method_nf4, &lq_method_int8,
};
#define N_METHODS ((int)(sizeof k_methods / sizeof k_methods[0]))

int lq_method_count(void) {
    return N_METHODS;
}

const char *lq_method_name(int i) {
    return (i >= 0 && i < N_METHODS) ? k_methods[i]->name : NULL;
}

const char *lq_method_help(int i) {
    return (i >= 0 && i < N_METHODS) ? k_methods[i]->help : NULL;
}

int lq_method_index(const char *name) {
    for (int i = 0; name && i < N_METHODS; i++)
        if (strcmp(k_methods[i]->name, name) == 0)
            return i;
    return -1;
}

const lq_method_traits *lq_method_traits_get(int i) {
    return (i >= 0 && i < N_METHODS) ? k_methods[i] : NULL;
}

/* ------------------------------------------------------------------------------------------
 * Which options a command takes: the option table gives each option its families, a method's
 * row the families it takes; the other commands are families of their own.
 * ------------------------------------------------------------------------------------------ */
static const char *const k_other_commands[] = {"ppl", "inspect", "convert"};

/* Whether the comma list `list` holds the word w[0, n). */
static int list_has(const char *list, const char *w, size_t n) {
    for (const char *m = list; m && *m;) {
        const char  *comma = strchr(m, ',');
        const size_t ml    = comma ? (size_t)(comma - m) : strlen(m);
        if (ml == n && strncmp(m, w, n) == 0)
            return 1;
        m = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Whether the comma lists a and b share a word. */
static int lists_meet(const char *a, const char *b) {
    for (const char *m = a; m && *m;) {
        const char  *comma = strchr(m, ',');
        const size_t ml    = comma ? (size_t)(comma - m) : strlen(m);
        if (list_has(b, m, ml))
            return 1;
        m = comma ? comma + 1 : NULL;
    }
    return 0;
}

int lq_param_applies(const lq_param_info *info, const char *command) {
    if (!info || !command || !*command)
        return 0;
    if (list_has(info->families, "*", 1))
        return 1;
    const int mi = lq_method_index(command);
    if (mi >= 0)
        return lists_meet(info->families, k_methods[mi]->options);
    for (size_t i = 0; i < sizeof k_other_commands / sizeof k_other_commands[0]; i++)
        if (!strcmp(command, k_other_commands[i])) /* a family name alone is no command */
            return list_has(info->families, command, strlen(command));
    return 0;
}

size_t lq_param_commands(const lq_param_info *info, char *buf, size_t cap) {
    if (cap > 0)
        buf[0] = '\0';
    if (!info)
        return 0;
    if (list_has(info->families, "*", 1)) /* "*" says it all */
        return (size_t)snprintf(buf, cap, "*");
    const int n_other = (int)(sizeof k_other_commands / sizeof k_other_commands[0]);
    size_t    len     = 0;
    for (int i = 0; i < N_METHODS + n_other; i++) {
        const char *c = i < N_METHODS ? k_methods[i]->name : k_other_commands[i - N_METHODS];
        if (!lq_param_applies(info, c))
            continue;
        const int w = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, "%s%s",
                               len ? "," : "", c);
        len += (size_t)(w > 0 ? w : 0);
    }
    return len;
}

lq_status lq_params_check_applies(const lq_params *p, const char *command, lq_err *err) {
    for (int i = 0; p && i < lq_param_count(); i++) {
        const lq_param_info *pi = lq_param_get_info(i);
        if (!lq_params_given(p, i) || lq_param_applies(pi, command))
            continue;
        char cmds[256];
        lq_param_commands(pi, cmds, sizeof cmds);
        return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s does not apply to %s (applies to: %s)",
                       pi->name, command, cmds);
    }
    return LQ_OK;
}
