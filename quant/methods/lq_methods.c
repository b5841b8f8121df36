/* The one table of methods. Adding a method: one lq_method_<name>.c + one row here. */
#include "lq_methods.h"

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
