/* Map a status name ("LQ_ERR_ST_TRUNCATED") back to its code, for data-driven bad-input tests
 * whose expected status is encoded in the file name. */
#ifndef LQ_TEST_STATUS_H
#define LQ_TEST_STATUS_H

#include "llmquant.h"

#include <string.h>

static inline int lq_test_status_from_name(const char *name, size_t len) {
    for (int c = 0; c < 128; c++) {
        const char *n = lq_status_name((lq_status)c);
        if (strncmp(n, "LQ_ERR_UNKNOWN", 14) != 0 && strlen(n) == len && !strncmp(n, name, len))
            return c;
    }
    return -1;
}

/* "<case>.<LQ_ERR_X>[.ext]" -> expected code, or -1. */
static inline int lq_test_expected_status(const char *fname) {
    const char *p = strstr(fname, ".LQ_");
    if (!p)
        return -1;
    p++;
    const char *e = strchr(p, '.');
    return lq_test_status_from_name(p, e ? (size_t)(e - p) : strlen(p));
}

#endif
