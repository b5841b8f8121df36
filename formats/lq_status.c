/* Status names and descriptions: one table, indexed by the pinned enum values. */
#include "lq_base.h"

#include <stdlib.h>

typedef struct {
    lq_status   code;
    const char *name;
    const char *desc;
} status_row;

#define ROW(c, d) {c, #c, d}
static const status_row k_status[] = {
    ROW(LQ_OK, "success"),
    ROW(LQ_ERR_INVALID_ARG, "invalid argument"),
    ROW(LQ_ERR_NOMEM, "out of memory"),
    ROW(LQ_ERR_IO, "input/output error"),
    ROW(LQ_ERR_NOT_FOUND, "file not found"),
    ROW(LQ_ERR_EXISTS, "output already exists"),
    ROW(LQ_ERR_DISK_FULL, "disk full"),
    ROW(LQ_ERR_PERMISSION, "permission denied"),
    ROW(LQ_ERR_UNSUPPORTED, "unsupported"),
    ROW(LQ_ERR_INTERNAL, "internal error"),
    ROW(LQ_ERR_INTERRUPTED, "interrupted"),
    ROW(LQ_ERR_OUTPUT_FOREIGN, "output not written by llmquant"),
    ROW(LQ_ERR_LOCKED, "output locked by another process"),
    ROW(LQ_ERR_ST_TRUNCATED, "safetensors file is truncated"),
    ROW(LQ_ERR_ST_HEADER_SIZE, "safetensors header size out of range"),
    ROW(LQ_ERR_ST_HEADER_JSON, "safetensors header is not valid JSON"),
    ROW(LQ_ERR_ST_HEADER_UTF8, "safetensors header is not UTF-8"),
    ROW(LQ_ERR_ST_DTYPE, "safetensors unknown dtype"),
    ROW(LQ_ERR_ST_SHAPE, "safetensors shape does not match byte length"),
    ROW(LQ_ERR_ST_OFFSETS, "safetensors offsets not contiguous"),
    ROW(LQ_ERR_ST_BOUNDS, "safetensors data out of file bounds"),
    ROW(LQ_ERR_ST_DUPLICATE, "duplicate tensor name"),
    ROW(LQ_ERR_ST_INDEX, "bad safetensors index"),
    ROW(LQ_ERR_ST_MISSING_TENSOR, "tensor missing"),
    ROW(LQ_ERR_GGUF_FORMAT, "GGUF file malformed"),
    ROW(LQ_ERR_GGUF_TYPE, "GGUF tensor type unsupported"),
    ROW(LQ_ERR_GGUF_TOKENIZER, "GGUF vocabulary unsupported"),
    ROW(LQ_ERR_JSON, "invalid JSON"),
    ROW(LQ_ERR_CONFIG_MISSING_KEY, "config key missing"),
    ROW(LQ_ERR_CONFIG_VALUE, "config value invalid"),
    ROW(LQ_ERR_UNSUPPORTED_ARCH, "unsupported architecture"),
    ROW(LQ_ERR_WEIGHT_DTYPE, "wrong weight dtype"),
    ROW(LQ_ERR_WEIGHT_SHAPE, "weight shape mismatch"),
    ROW(LQ_ERR_WEIGHT_NONFINITE, "NaN or Inf in weights"),
    ROW(LQ_ERR_QFORMAT, "inconsistent quantized tensors"),
    ROW(LQ_ERR_TOKENIZER_MISSING, "tokenizer missing"),
    ROW(LQ_ERR_TOKENIZER_FORMAT, "tokenizer file malformed"),
    ROW(LQ_ERR_TOKENIZER_UNSUPPORTED, "tokenizer type unsupported"),
    ROW(LQ_ERR_CALIB_EMPTY, "not enough text"),
    ROW(LQ_ERR_CALIB_FORMAT, "calibration file malformed"),
    ROW(LQ_ERR_ZSTD, "zstd stream corrupt"),
    ROW(LQ_ERR_CHOLESKY, "Hessian not positive definite"),
    ROW(LQ_ERR_PPL_BOUND, "perplexity increase over bound"),
    ROW(LQ_ERR_NUMERIC, "non-finite values produced"),
    ROW(LQ_ERR_BITS_UNSUPPORTED, "bit width not storable in the format"),
    ROW(LQ_ERR_NOTHING_TO_QUANTIZE, "nothing to quantize"),
    ROW(LQ_ERR_NO_DEVICE, "no CUDA device"),
    ROW(LQ_ERR_CUDA, "CUDA error"),
    ROW(LQ_ERR_NO_CUDA_BUILD, "built without CUDA"),
    ROW(LQ_ERR_JOB_FILE, "batch file malformed"),
    ROW(LQ_ERR_JOBS_FAILED, "some jobs failed"),
};
#undef ROW

static const status_row *find(lq_status s) {
    for (size_t i = 0; i < sizeof k_status / sizeof k_status[0]; i++)
        if (k_status[i].code == s)
            return &k_status[i];
    return NULL;
}

const char *lq_status_name(lq_status s) {
    const status_row *r = find(s);
    return r ? r->name : "LQ_ERR_UNKNOWN";
}

const char *lq_status_str(lq_status s) {
    const status_row *r = find(s);
    return r ? r->desc : "unknown status";
}

unsigned lq_version(void) {
    return LQ_VERSION_NUMBER;
}

const char *lq_version_string(void) {
    return LQ_VERSION_STRING;
}

void lq_free(void *p) {
    free(p);
}
