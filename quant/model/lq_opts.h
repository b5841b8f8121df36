/* lq_opts.h -- options as the library reads them: one struct generated from lq_options.def,
 * filled once from a validated lq_params at the API edge. Strings point into the lq_params (or
 * the table's defaults) and live as long as it does. */
#ifndef LQ_OPTS_H
#define LQ_OPTS_H

#include "lq_base.h"

#define LQ_OPT_CTYPE_INT   int64_t
#define LQ_OPT_CTYPE_SIZE  int64_t /* bytes; 0 when unset */
#define LQ_OPT_CTYPE_FLOAT double
#define LQ_OPT_CTYPE_BOOL  int
#define LQ_OPT_CTYPE_STR   const char *

typedef struct lq_opts {
#define LQ_OPT(name, type, ...) LQ_OPT_CTYPE_##type name;
#include "lq_options.def"
#undef LQ_OPT
    struct {
#define LQ_OPT(name, ...) unsigned char name;
#include "lq_options.def"
#undef LQ_OPT
    } set; /* 1: given by the caller, 0: the table's default */
} lq_opts;

/* Every option of p (NULL: all defaults), parsed once. */
void lq_opts_read(const lq_params *p, lq_opts *o);
/* Whether option i (lq_param_get_info order) was given in p. */
int lq_params_given(const lq_params *p, int i);

#endif
