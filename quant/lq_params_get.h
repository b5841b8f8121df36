/* Typed access to lq_params for library code (values were validated by lq_params_set). */
#ifndef LQ_PARAMS_GET_H
#define LQ_PARAMS_GET_H

#include "lq_base.h"

int64_t lq_params_i64(const lq_params *p, const char *name);
double  lq_params_f64(const lq_params *p, const char *name);
int     lq_params_bool(const lq_params *p, const char *name);
/* Bytes for LQ_PT_SIZE (0 when unset). */
int64_t lq_params_size(const lq_params *p, const char *name);
/* Whether the caller set it explicitly. */
int     lq_params_is_set(const lq_params *p, const char *name);
/* A copy with the same explicitly set values (NULL when out of memory), for a job that fills in
 * a default of its own. */
lq_params *lq_params_dup(const lq_params *p);

#endif
