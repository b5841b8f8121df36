/* lq_json.h -- small helpers over cJSON for typed access with file-named errors. */
#ifndef LQ_JSON_H
#define LQ_JSON_H

#include "lq_base.h"

#include <cjson/cJSON.h>

#define LQ_JSON_MAX_DEPTH 128

/* True when brackets outside strings nest deeper than max_depth (a linear pre-scan; the text
 * need not be valid JSON). */
bool lq_json_depth_exceeds(const char *text, size_t len, int max_depth);

/* True when p[0..n) is JSON whitespace only. */
bool lq_json_only_space(const char *p, size_t n);

/* Byte offset of the first string escape "\u0000" (case-insensitive hex), or -1. cJSON decodes
 * it into a NUL that silently ends the C string, so "a\u0000b" would read as "a". */
int64_t lq_json_escaped_nul(const char *text, size_t len);

/* The first key that appears twice in one object anywhere under v, or NULL (NULL too when out
 * of memory: *oom is set). Python's json keeps the last, cJSON the first: refuse both. */
const char *lq_json_duplicate_key(const cJSON *v, int *oom);

/* Parse a JSON text; LQ_ERR_JSON "<label>: invalid JSON near byte N". Nesting deeper than
 * LQ_JSON_MAX_DEPTH is refused (LQ_ERR_JSON) before cJSON recurses; so are anything but
 * whitespace after the value, an escaped NUL in a string, and a key repeated in an object. */
lq_status lq_json_parse(const char *text, size_t len, const char *label, cJSON **out, lq_err *err);
/* Read and parse a file (size limit max_bytes). */
lq_status lq_json_load_file(const char *path, int64_t max_bytes, cJSON **out, lq_err *err);

/* Typed getters. `required`: missing -> LQ_ERR_CONFIG_MISSING_KEY; wrong type or not an
 * integer/in range -> LQ_ERR_CONFIG_VALUE; messages "<label>: key \"k\" ...". When not required
 * and missing, *out keeps its prior value (the default) and LQ_OK is returned. */
lq_status lq_json_get_i64(const cJSON *obj, const char *key, int required, int64_t lo, int64_t hi,
                          int64_t *out, const char *label, lq_err *err);
lq_status lq_json_get_f64(const cJSON *obj, const char *key, int required, double *out,
                          const char *label, lq_err *err);
lq_status lq_json_get_bool(const cJSON *obj, const char *key, int required, int *out,
                           const char *label, lq_err *err);
lq_status lq_json_get_str(const cJSON *obj, const char *key, int required, char *buf, size_t cap,
                          const char *label, lq_err *err);

/* Numbers that text spells with a fraction or an exponent ("0.0", "1e-05") keep that spelling
 * in root (a tree parsed from text, then edited), matched by their path and value: cJSON would
 * print 0.0 as 0, and strict readers refuse an integer for a float field (transformers 5's
 * config dataclasses: MixtralConfig.router_jitter_noise). The items become raw JSON, so call it
 * last, before writing. text must parse (it did, into root). */
lq_status lq_json_keep_float_spelling(cJSON *root, const char *text, size_t len, lq_err *err);

/* Serialize with 2-space indentation and a trailing newline and write atomically
 * (tmp + rename) to path. */
lq_status lq_json_write_file(const cJSON *obj, const char *path, lq_err *err);

#endif
