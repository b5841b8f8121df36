/* Job API: lq_quantize (argument validation only until the pipeline lands) and the method list.
 * TODO(pipeline): the method list moves into the method-traits table (quant/lq_methods.c) and
 * lq_quantize's body is replaced by the layer-by-layer driver; keep the validation order (it is
 * what the CLI tests observe: method, model dir, config.json, options, output dir). */
/* realpath is XSI, not in plain _POSIX_C_SOURCE. */
#define _XOPEN_SOURCE 700

#include "lq_base.h"
#include "lq_config.h"
#include "lq_params_get.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct method_row {
    const char *name;
    const char *help;
} method_row;

static const method_row k_methods[] = {
    {"rtn", "round-to-nearest per group, no calibration data (GPTQ v1 checkpoint)"},
    {"gptq", "GPTQ: Hessian-based error compensation from calibration data (GPTQ v1 "
             "checkpoint for AutoGPTQ/transformers/vLLM)"},
    {"awq", "AWQ: activation-aware scaling and clipping from calibration data (AutoAWQ GEMM "
            "checkpoint)"},
    {"nf4", "bitsandbytes NF4: 4-bit normal-float blocks with absmax, no calibration data"},
    {"int8", "bitsandbytes LLM.int8: 8-bit row-wise absmax with fp16 outlier columns"},
};
#define N_METHODS ((int)(sizeof k_methods / sizeof k_methods[0]))

int lq_method_count(void) {
    return N_METHODS;
}

const char *lq_method_name(int i) {
    return (i >= 0 && i < N_METHODS) ? k_methods[i].name : NULL;
}

const char *lq_method_help(int i) {
    return (i >= 0 && i < N_METHODS) ? k_methods[i].help : NULL;
}

static int method_index(const char *name) {
    for (int i = 0; i < N_METHODS; i++)
        if (strcmp(k_methods[i].name, name) == 0)
            return i;
    return -1;
}

/* An output equal to, inside or around the input could destroy the input (--force replaces
 * the output directory). */
static int paths_overlap(const char *model_dir, const char *out_dir) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(model_dir, a))
        return 0;
    /* out_dir may not exist yet: resolve its parent. */
    char   parent[PATH_MAX];
    size_t n = strlen(out_dir);
    if (n >= sizeof parent)
        return 0;
    memcpy(parent, out_dir, n + 1);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char       *slash = strrchr(parent, '/');
    const char *base  = slash ? slash + 1 : parent;
    if (slash == parent)
        strcpy(b, "/");
    else if (slash) {
        *slash = 0;
        if (!realpath(parent, b))
            return 0;
    } else if (!realpath(".", b))
        return 0;
    size_t bl = strlen(b);
    if (bl + 1 + strlen(base) + 1 > sizeof b)
        return 0;
    if (b[bl - 1] != '/')
        b[bl++] = '/';
    strcpy(b + bl, base);
    size_t al = strlen(a);
    bl        = strlen(b);
    return strcmp(a, b) == 0 || (strncmp(a, b, al) == 0 && b[al] == '/') ||
           (strncmp(b, a, bl) == 0 && a[bl] == '/');
}

lq_status lq_quantize(const char *method, const char *model_dir, const char *out_dir,
                      const lq_params *p, const lq_callbacks *cb, char **report_json,
                      lq_err *err) {
    (void)cb;
    if (report_json)
        *report_json = NULL;
    if (!method || !model_dir || !out_dir || !*model_dir || !*out_dir)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_quantize: method, model_dir and out_dir are "
                                                "required");
    if (method_index(method) < 0)
        return lq_fail(err, LQ_ERR_INVALID_ARG,
                       "unknown method \"%s\" (methods: rtn, gptq, awq, nf4, int8)", method);
    struct stat sb;
    if (stat(model_dir, &sb) != 0)
        return lq_fail(err, lq_status_from_errno(errno), "%s: %s", model_dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return lq_fail(err, LQ_ERR_NOT_FOUND, "%s: not a directory", model_dir);
    char cfgpath[4096];
    if (!lq_path_join(cfgpath, sizeof cfgpath, model_dir, "config.json"))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "%s: path too long", model_dir);
    if (!lq_file_exists(cfgpath))
        return lq_fail(err, LQ_ERR_NOT_FOUND,
                       "%s: no config.json (not a Hugging Face model directory)", model_dir);
    lq_model_config cfg;
    LQ_TRY(lq_config_load(model_dir, &cfg, err));
    for (int i = 0; i < lq_param_count(); i++) {
        const lq_param_info *pi = lq_param_get_info(i);
        if (lq_params_is_set(p, pi->name) && !lq_param_applies(pi, method))
            return lq_fail(err, LQ_ERR_INVALID_ARG, "option %s does not apply to %s (applies to: %s)",
                           pi->name, method, pi->methods);
    }
    if (paths_overlap(model_dir, out_dir))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "%s: output overlaps the model directory %s",
                       out_dir, model_dir);
    if (lstat(out_dir, &sb) == 0 && !lq_params_bool(p, "force"))
        return lq_fail(err, LQ_ERR_EXISTS, "%s: already exists (use --force to replace it)",
                       out_dir);
    return lq_fail(err, LQ_ERR_UNSUPPORTED,
                   "%s: the %s quantization pipeline is not implemented yet", model_dir, method);
}
