/*
 * llmquant.h -- the stable public C ABI of llmquant.
 *
 * Two audiences:
 *   1. Runtimes that link the dequant-matmul kernels: lq_qlinear + lq_qlinear_forward_{cpu,cuda},
 *      and the checkpoint loader lq_checkpoint_* that fills lq_qlinear from a quantized
 *      Hugging Face directory written by llmquant (GPTQ v1, AutoAWQ GEMM, bitsandbytes NF4 /
 *      LLM.int8).
 *   2. Programs that drive conversion: lq_quantize / lq_perplexity / lq_inspect with an
 *      lq_params key-value set (the CLI is one such program).
 *
 * Conventions
 *   - Every fallible function returns lq_status (LQ_OK == 0). Values are pinned and never reused.
 *     When an lq_err* is passed (may be NULL), it receives the code and a one-line message that
 *     names the file/tensor and the problem. The library never prints, exits or aborts.
 *   - Indices and sizes are int64_t. Matrices are row-major.
 *   - A Linear layer y = x W^T + b has W of shape [n, k] (n = out_features, k = in_features),
 *     exactly as torch.nn.Linear.weight.
 *   - fp16 values are passed as uint16_t bit patterns (IEEE binary16).
 *   - Thread-safety: functions are reentrant; objects (lq_checkpoint, lq_params, lq_cuda_ctx)
 *     may be shared between threads for reading, not for concurrent mutation.
 *
 * Compiles as C11 and as C++17.
 */
#ifndef LLMQUANT_H
#define LLMQUANT_H

#include <stddef.h>
#include <stdint.h>

#define LQ_VERSION_MAJOR  0
#define LQ_VERSION_MINOR  2
#define LQ_VERSION_PATCH  4
#define LQ_VERSION_NUMBER (LQ_VERSION_MAJOR * 10000 + LQ_VERSION_MINOR * 100 + LQ_VERSION_PATCH)
#define LQ_VERSION_STRING "0.2.4"

#if defined(_WIN32)
#define LQ_API
#elif defined(LQ_BUILDING_LIB)
#define LQ_API __attribute__((visibility("default")))
#else
#define LQ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
 * Status codes. Append-only; explicit values; the CLI uses the value as its exit code, so every
 * value stays below 126. Ranges: 1-19 generic, 20-39 checkpoint files (safetensors, GGUF),
 * 40-54 JSON/config,
 * 55-69 model/weights, 70-79 tokenizer, 80-89 calibration data, 90-99 quantization,
 * 100-109 device, 110-119 jobs.
 * ------------------------------------------------------------------------------------------ */
typedef enum lq_status {
    LQ_OK                     = 0,
    LQ_ERR_INVALID_ARG        = 2,  /* bad option value or API misuse (1 is left to shells) */
    LQ_ERR_NOMEM              = 3,  /* allocation failed / over --max-memory */
    LQ_ERR_IO                 = 4,  /* read/write/rename failed */
    LQ_ERR_NOT_FOUND          = 5,  /* file or directory missing */
    LQ_ERR_EXISTS             = 6,  /* output exists and --force not given */
    LQ_ERR_DISK_FULL          = 7,  /* ENOSPC / EDQUOT while writing */
    LQ_ERR_PERMISSION         = 8,  /* EACCES / EPERM / EROFS */
    LQ_ERR_UNSUPPORTED        = 9,  /* valid input this build does not handle */
    LQ_ERR_INTERNAL           = 10, /* a bug: please report */
    LQ_ERR_INTERRUPTED        = 11, /* cancelled by the progress callback / signal */
    LQ_ERR_OUTPUT_FOREIGN     = 12, /* --force: the output is not a directory llmquant wrote */
    LQ_ERR_LOCKED             = 13, /* another process is writing the same output */

    LQ_ERR_ST_TRUNCATED       = 20, /* file shorter than the 8-byte prefix / header / data */
    LQ_ERR_ST_HEADER_SIZE     = 21, /* header length 0 or over the 100 MB limit */
    LQ_ERR_ST_HEADER_JSON     = 22, /* header is not valid JSON / not an object / bad entry */
    LQ_ERR_ST_HEADER_UTF8     = 23, /* header is not UTF-8 */
    LQ_ERR_ST_DTYPE           = 24, /* unknown dtype string */
    LQ_ERR_ST_SHAPE           = 25, /* shape x dtype size != byte length, or overflow */
    LQ_ERR_ST_OFFSETS         = 26, /* offsets not contiguous from 0 / end before begin */
    LQ_ERR_ST_BOUNDS          = 27, /* data extends past the end of file, or trailing bytes */
    LQ_ERR_ST_DUPLICATE       = 28, /* two tensors with one name (header or across shards) */
    LQ_ERR_ST_INDEX           = 29, /* model.safetensors.index.json malformed / names a bad shard */
    LQ_ERR_ST_MISSING_TENSOR  = 30, /* a tensor the model needs is absent */
    LQ_ERR_GGUF_FORMAT        = 31, /* GGUF file malformed (magic, version, bounds, layout) */
    LQ_ERR_GGUF_TYPE          = 32, /* GGUF tensor type unknown or not decodable */
    LQ_ERR_GGUF_TOKENIZER     = 33, /* GGUF vocabulary that cannot become a tokenizer file */

    LQ_ERR_JSON               = 40, /* a JSON file does not parse */
    LQ_ERR_CONFIG_MISSING_KEY = 41, /* config.json lacks a required key */
    LQ_ERR_CONFIG_VALUE       = 42, /* config.json key has a bad type or value */
    LQ_ERR_UNSUPPORTED_ARCH   = 43, /* model_type / architecture not supported */

    LQ_ERR_WEIGHT_DTYPE       = 55, /* tensor dtype not usable for this role (e.g. I32 weight) */
    LQ_ERR_WEIGHT_SHAPE       = 56, /* tensor shape does not match config.json */
    LQ_ERR_WEIGHT_NONFINITE   = 57, /* NaN/Inf in weights */
    LQ_ERR_QFORMAT            = 58, /* quantized checkpoint inconsistent (packing, g_idx, ...) */

    LQ_ERR_TOKENIZER_MISSING  = 70, /* no tokenizer.json / tokenizer.model / tok*.bin */
    LQ_ERR_TOKENIZER_FORMAT   = 71, /* tokenizer file malformed */
    LQ_ERR_TOKENIZER_UNSUPPORTED = 72, /* tokenizer model type we do not implement */

    LQ_ERR_CALIB_EMPTY        = 80, /* calibration/eval text has too few tokens */
    LQ_ERR_CALIB_FORMAT       = 81, /* .jsonl without "text", bad UTF-8, ... */
    LQ_ERR_ZSTD               = 82, /* zstd stream corrupt or truncated */

    LQ_ERR_CHOLESKY           = 90, /* Hessian not positive definite even after damping retries */
    LQ_ERR_PPL_BOUND          = 91, /* --check-ppl: perplexity increase over the bound */
    LQ_ERR_NUMERIC            = 92, /* NaN/Inf produced during quantization or evaluation */
    LQ_ERR_BITS_UNSUPPORTED   = 93, /* the method's format cannot store this bit width */
    LQ_ERR_NOTHING_TO_QUANTIZE = 94, /* no linear of the model fits the format at these settings */

    LQ_ERR_NO_DEVICE          = 100, /* --device cuda but no usable CUDA device */
    LQ_ERR_CUDA               = 101, /* CUDA runtime / cuBLAS / cuSOLVER error */
    LQ_ERR_NO_CUDA_BUILD      = 102, /* library built without CUDA */

    LQ_ERR_JOB_FILE           = 110, /* batch file malformed */
    LQ_ERR_JOBS_FAILED        = 111  /* batch: at least one job failed */
} lq_status;

/* Short stable name of a status ("LQ_ERR_ST_TRUNCATED"); never NULL. */
LQ_API const char *lq_status_name(lq_status s);
/* Human description of a status ("safetensors file is truncated"); never NULL. */
LQ_API const char *lq_status_str(lq_status s);

/* Error detail filled by functions that take an lq_err*. msg is one line, no trailing newline. */
typedef struct lq_err {
    lq_status code;
    char      msg[512];
} lq_err;

/* LQ_VERSION_NUMBER of the linked library (compare with the header's macro). */
LQ_API unsigned    lq_version(void);
LQ_API const char *lq_version_string(void);

/* The OpenBLAS kernels in use ("SkylakeX", "Haswell", "Prescott", ...), and the value of the
 * OPENBLAS_CORETYPE environment variable that would run faster ones on this CPU, or NULL when the
 * loaded ones already use what it supports or OPENBLAS_CORETYPE is set. OpenBLAS picks its
 * kernels from the CPU's model when it loads: a CPU it does not know (a newer Xeon or a
 * hypervisor's generic model) gets SSE3 ones, 3x slower. The variable only takes effect in a new
 * process: the llmquant program re-executes itself once with it; programs linking the library
 * can do the same, or set it before they start. */
LQ_API const char *lq_blas_coretype(void);
LQ_API const char *lq_blas_better_coretype(void);

/* Free memory the library returned (strings, JSON reports). free(NULL)-style no-op on NULL. */
LQ_API void lq_free(void *p);

/* ------------------------------------------------------------------------------------------
 * Quantized linear layers: one descriptor, one forward per backend.
 * ------------------------------------------------------------------------------------------ */
typedef enum lq_format {
    LQ_FMT_DENSE = 0, /* unquantized: dense [n, k] in the element type dense_dtype names */
    LQ_FMT_GPTQ  = 1, /* GPTQ v1 (AutoGPTQ): bits 2,3,4,8, groups, act-order g_idx */
    LQ_FMT_AWQ   = 2, /* AutoAWQ GEMM: 4-bit, zero point, groups, interleaved packing */
    LQ_FMT_NF4   = 3, /* bitsandbytes NF4, blockwise absmax, optional double quant */
    LQ_FMT_INT8  = 4, /* bitsandbytes LLM.int8 row-wise absmax + fp16 outlier columns */
    LQ_FMT_COUNT
} lq_format;

/* Element type of an LQ_FMT_DENSE descriptor's dense array (0.2.0). LQ_DENSE_F32 (0, what a
 * zeroed descriptor says) is float32 on the CPU and fp16 on CUDA, as before 0.2.0; fp16 and
 * bf16 weights run as they are stored on both, converted to float32 as they are read (exact),
 * so a checkpoint needs half the memory of its float32 copy. */
typedef enum lq_dense_dtype {
    LQ_DENSE_F32  = 0,
    LQ_DENSE_F16  = 1,
    LQ_DENSE_BF16 = 2,
} lq_dense_dtype;

/*
 * Descriptor of one quantized Linear (W is [n, k]). Pointers are host pointers for the *_cpu
 * entry points and device pointers for the *_cuda ones; the descriptor does not own them.
 * Unused fields are 0/NULL. Layouts are exactly those of the on-disk tensors:
 *
 *  GPTQ (bits b in {2,3,4,8}, G = ceil(k / group_size) groups; group_size = k for per-channel):
 *    qweight int32 [k*b/32, n]    codes packed along k, LSB = lowest k (3-bit: 32 k -> 3 words)
 *    qzeros  int32 [G, n*b/32]    (zero - 1) packed along n  (v1 convention)
 *    scales  fp16  [G, n]
 *    g_idx   int32 [k]            group of each input channel (act-order: arbitrary order)
 *    perm    int32 [k] or NULL    a sorted descriptor (lq_qlinear_sort): row c of qweight and
 *                                 g_idx holds input channel perm[c], so y = sum_c x[perm[c]] W[c]
 *    requires k % 32 == 0 (b = 3: also n % 32 == 0), other b: k % (32/b) == 0, n % (32/b) == 0
 *  AWQ (bits 4, G = k / group_size):
 *    qweight int32 [k, n/8]       codes packed along n with order [0,2,4,6,1,3,5,7]
 *    qzeros  int32 [G, n/8]       zero points (as is), same interleave
 *    scales  fp16  [G, n]
 *    requires k % group_size == 0, n % 8 == 0
 *  NF4 (bits 4, blocksize = group_size over the flattened row-major [n, k]):
 *    qweight uint8 [n*k/2]        two codes per byte, first element in the high nibble
 *    absmax  float32 [nblocks]    or uint8 [nblocks] when nested_blocksize > 0 (double quant):
 *                                 absmax[i] = nested_code[q[i]] * nested_absmax[i / nested_blocksize]
 *                                             + nested_offset
 *    quant_map float32 [16]       NF4 code table
 *    nested_absmax float32 [ceil(nblocks / nested_blocksize)], nested_code float32 [256]
 *    requires n*k even
 *  INT8 (LLM.int8):
 *    qweight int8 [n, k]          CB = round(W * 127 / SCB)
 *    scb     float32 [n]          per-row absmax
 *    outlier_idx int32 [n_outlier] sorted input columns computed in fp16 (from calibration)
 *    outlier_w   fp16 [n, n_outlier] those weight columns in fp16
 *    threshold   activations with |x| >= threshold add their column to the fp16 part at run
 *                time (bitsandbytes semantics; 0 disables)
 *  bias: fp16 [n] or NULL (all formats).
 */
typedef struct lq_qlinear {
    int32_t format;     /* lq_format */
    int32_t bits;       /* code width */
    int64_t n;          /* out_features */
    int64_t k;          /* in_features */
    int64_t group_size; /* GPTQ/AWQ group (k = per-channel); NF4 blocksize */

    const void    *qweight;
    const void    *qzeros;
    const void    *scales;
    const int32_t *g_idx;

    const void  *absmax;
    const float *quant_map;
    const float *nested_absmax;
    const float *nested_code;
    float        nested_offset;
    int32_t      nested_blocksize; /* 0: absmax is float32 (no double quant) */

    const float    *scb;
    const int32_t  *outlier_idx;
    const uint16_t *outlier_w;
    int64_t         n_outlier;
    float           threshold;

    const uint16_t *bias;  /* fp16 [n] or NULL */
    const void     *dense; /* LQ_FMT_DENSE: [n, k] of dense_dtype */
    const int32_t  *perm;  /* GPTQ: NULL, or the input channel of each stored row (0.2.0) */
    int32_t         dense_dtype; /* LQ_FMT_DENSE: lq_dense_dtype (0.2.0) */
} lq_qlinear;

/* Validates dimensions and field presence of a descriptor (not the data). */
LQ_API lq_status lq_qlinear_check(const lq_qlinear *w, lq_err *err);

/* Bytes of each array the descriptor references, for copying it elsewhere. */
LQ_API size_t lq_qlinear_bytes(const lq_qlinear *w);

/* The layout the fast kernels take, made once at load time (as exllama and vLLM do).
 * Act-order GPTQ (g_idx not c / group_size) runs on the generic kernels, which look up a group
 * per weight: lq_qlinear_sort writes into buf qweight and g_idx sorted by group plus perm (and
 * composes an existing perm), and fills *out; the other arrays stay w's. The kernels then
 * gather x by perm. AWQ (0.2.1): its words hold 8 columns of one input channel, so the kernels
 * would unpack them across channel rows on every call; lq_qlinear_sort writes the same matrix
 * in GPTQ v1's layout (qweight, qzeros, g_idx in buf; the scales stay w's) and *out becomes an
 * LQ_FMT_GPTQ descriptor (exact: the same weights bit for bit). GPTQ 3-bit (0.2.3): its codes
 * straddle words, which every kernel decodes more slowly than 4-bit ones (at one row the decode
 * bounds it), so lq_qlinear_sort writes the same codes and zero points 4 bits wide (qweight,
 * qzeros in buf; bits becomes 4): the same weights bit for bit, a third more code bytes.
 * lq_qlinear_sort_bytes: the bytes buf (64-byte aligned) needs, 0 when there is nothing to do
 * (then lq_qlinear_sort sets *out = *w). A sorted descriptor is for the kernels and uploads:
 * checkpoints are written from the checkpoint's own arrays. */
LQ_API size_t    lq_qlinear_sort_bytes(const lq_qlinear *w);
LQ_API lq_status lq_qlinear_sort(const lq_qlinear *w, void *buf, size_t cap, lq_qlinear *out);

/*
 * CPU: y[m, n] = x[m, k] @ W^T (+ bias), float32 activations, float32 accumulation.
 * ws: caller workspace of at least lq_qlinear_workspace_cpu(w, m) bytes, 64-byte aligned
 * (NULL allowed when the size is 0). nthreads <= 0: use all cores. Thread-safe for distinct y/ws.
 */
LQ_API size_t    lq_qlinear_workspace_cpu(const lq_qlinear *w, int64_t m);
LQ_API lq_status lq_qlinear_forward_cpu(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                        void *ws, size_t ws_size, int nthreads);
/*
 * The same with flags (0: exactly lq_qlinear_forward_cpu). LQ_QLINEAR_INT_X lets GPTQ (bits
 * 2/4/8, and 3 where the CPU has AVX-512 VBMI; act-order once sorted by lq_qlinear_sort),
 * AWQ and NF4 (int8 at every m, whole blocks of >= 64 channels per row; its 16 code values
 * scaled to int8 too, ~1e-5 more NMSE) quantize the activations per row and block of channels
 * (the group, or 128/256 channels of it) and use integer dot products where the CPU has
 * AVX-512 VNNI, as llama.cpp does with its Q8 activations: int8 for 1 to 1024 rows (~5e-5 NMSE
 * on gaussian rows, more with outlier channels: see docs/kernels.md). GPTQ and AWQ as stored
 * had int16 at m <= 4 rows before 0.2.3 (the float result within ~1e-9 NMSE); int8 is faster
 * on Intel's two 512-bit ports. On CPUs with AVX2 but not VNNI
 * (0.2.1), GPTQ 2/3/4/8-bit (AWQ once lq_qlinear_sort has put it in GPTQ's layout) has the
 * same semantics, bit for bit. Elsewhere the float kernels run.
 * LQ_QLINEAR_BF16_X (0.2.2) lets dense bf16 weights run on activations rounded to bf16 (to
 * nearest even; products exact, float32 sums) with AVX-512 BF16 dot products where the CPU has
 * them, as llama.cpp does for BF16 weights: ~3e-6 NMSE on gaussian rows, twice the
 * multiply-adds of float32 FMAs a cycle on AMD (half on Intel). From 9 rows, where the CPU has
 * AMX-BF16, AMX tiles instead (and NF4 on int8 activations from 16 rows where it has
 * AMX-INT8); to use them the library asks Linux for this process's tile state (arch_prctl
 * ARCH_REQ_XCOMP_PERM, a process-wide grant) when such a forward runs.
 * LQ_QLINEAR_F16_X (0.2.4) does the same for dense fp16 weights on activations rounded to fp16
 * (to nearest even; magnitudes from 65520 become infinities) where the CPU has AVX-512, as
 * llama.cpp does for F16 weights: at one row the activations are read as fp16, half the cache
 * of float32 ones beside the weight stream; elsewhere the float kernels on the rounded values.
 * Elsewhere, and for other weights, the float kernels run. The workspace size depends on the
 * flags.
 */
#define LQ_QLINEAR_INT_X 1u
#define LQ_QLINEAR_INT_X_ROWS 1024 /* the most rows the integer-activation kernels take */
#define LQ_QLINEAR_BF16_X 2u
#define LQ_QLINEAR_F16_X      4u
LQ_API size_t    lq_qlinear_workspace_cpu_ex(const lq_qlinear *w, int64_t m, unsigned flags);
LQ_API lq_status lq_qlinear_forward_cpu_ex(const lq_qlinear *w, const float *x, int64_t m, float *y,
                                           void *ws, size_t ws_size, int nthreads, unsigned flags);
/* CPU: dequantize W to float32 out[n, k]. */
LQ_API lq_status lq_qlinear_dequant_cpu(const lq_qlinear *w, float *out, int nthreads);

/* ------------------------------------------------------------------------------------------
 * CUDA. All pointers in the descriptor and x/y/ws are device pointers (x, y 16-byte aligned,
 * ws 256-byte aligned, as cudaMalloc returns); stream is a cudaStream_t (NULL = default
 * stream). Launchers never allocate and never synchronize; errors from the launch are returned
 * as LQ_ERR_CUDA. A library built without CUDA returns LQ_ERR_NO_CUDA_BUILD from every entry
 * point below (device count 0, workspace 0).
 * ------------------------------------------------------------------------------------------ */
/* Holds a cuBLAS handle (+ its workspace) for the dequant+GEMM path (m > 16). A forward call
 * binds the handle to its stream: use one ctx per thread. */
typedef struct lq_cuda_ctx lq_cuda_ctx;

/* Number of usable CUDA devices (0 when no driver / no device; never crashes). LQ_OK with 0 in
 * a library built without CUDA too. */
LQ_API lq_status lq_cuda_device_count(int *count);
/* 1 when the library was built with its CUDA kernels, else 0. */
LQ_API int lq_cuda_built(void);
/* Name, compute capability, memory and peak bandwidth (GB/s, from clocks) of a device. */
LQ_API lq_status lq_cuda_device_info(int device, char *name, size_t name_cap, int *cc_major,
                                     int *cc_minor, size_t *mem_bytes, double *peak_gbps);
/* A ctx holds a cuBLAS handle for one device; every call with it runs on that device whatever
 * the calling thread's current device. Use a ctx from one host thread at a time (its handle is
 * cuBLAS's); calls on different streams are independent, each works in its own workspace. */
LQ_API lq_status lq_cuda_ctx_create(int device, lq_cuda_ctx **out, lq_err *err);
LQ_API void      lq_cuda_ctx_free(lq_cuda_ctx *ctx);
/* What caused the last LQ_ERR_CUDA of a call made with ctx (the CUDA runtime's or cuBLAS's
 * message), "" when none; owned by ctx, valid until its next call. */
LQ_API const char *lq_cuda_ctx_error(const lq_cuda_ctx *ctx);

/* y[m, n] (fp16) = x[m, k] (fp16) @ W^T (+ bias); fp32 accumulation. ws: at least
 * lq_qlinear_workspace_cuda(w, m) bytes (split-k partials, the fp16 W of the cuBLAS path for
 * m > 16 with its fp32 product when there is a bias and cuBLAS's workspace, LLM.int8's quantized
 * activations); ctx may be NULL when that path is not taken. x, y and ws must be 16-byte
 * aligned and must not overlap (LQ_ERR_INVALID_ARG otherwise). */
LQ_API size_t    lq_qlinear_workspace_cuda(const lq_qlinear *w, int64_t m);
LQ_API lq_status lq_qlinear_forward_cuda(lq_cuda_ctx *ctx, const lq_qlinear *w, const void *x,
                                         int64_t m, void *y, void *ws, size_t ws_size,
                                         void *stream);
/* W -> fp16 out[n, k] on the device. */
LQ_API lq_status lq_qlinear_dequant_cuda(const lq_qlinear *w, void *out, void *stream);
/* Copy a host descriptor's arrays into one device buffer of lq_qlinear_bytes(host) bytes (plus
 * 256 bytes of alignment slack per array: see lq_qlinear_device_bytes) and fill *dev with
 * device pointers. Asynchronous on stream. LQ_FMT_DENSE: the host array is copied as it is, so
 * an LQ_DENSE_F32 one must hold fp16 (the device layout of that type), not float32. */
LQ_API size_t    lq_qlinear_device_bytes(const lq_qlinear *host);
LQ_API lq_status lq_qlinear_upload(const lq_qlinear *host, void *dev_buf, size_t cap,
                                   lq_qlinear *dev, void *stream);

/* ------------------------------------------------------------------------------------------
 * Quantized checkpoint loader (directories written by llmquant or the reference tools).
 * Descriptors point into the memory-mapped files (or into copies when a tensor is misaligned)
 * and stay valid until lq_checkpoint_close. A compressed-tensors "pack-quantized" checkpoint
 * (llm-compressor, vLLM) reads as LQ_FMT_GPTQ: its linears become GPTQ descriptors (copies)
 * holding the same weights.
 * ------------------------------------------------------------------------------------------ */
typedef struct lq_checkpoint lq_checkpoint;

LQ_API lq_status   lq_checkpoint_open(const char *dir, lq_checkpoint **out, lq_err *err);
LQ_API void        lq_checkpoint_close(lq_checkpoint *ck);
/* Format of the quantized linears in the checkpoint (LQ_FMT_DENSE for an unquantized one). */
LQ_API lq_format   lq_checkpoint_format(const lq_checkpoint *ck);
LQ_API int64_t     lq_checkpoint_num_linears(const lq_checkpoint *ck);
/* Module name of linear i ("model.layers.0.self_attn.q_proj"), valid until close. */
LQ_API const char *lq_checkpoint_linear_name(const lq_checkpoint *ck, int64_t i);
/* The linear as the checkpoint stores it (act-order GPTQ unsorted: see lq_qlinear_sort; dense
 * fp16/bf16 weights in their own type, dense_dtype, since 0.2.0; float32 before). */
LQ_API lq_status   lq_checkpoint_get_linear(const lq_checkpoint *ck, const char *name,
                                            lq_qlinear *out, lq_err *err);

/* ------------------------------------------------------------------------------------------
 * Conversion and evaluation jobs.
 * Options are a string key-value set validated against one table (lq_param_info); the CLI maps
 * "--group-size 128" to key "group_size".
 * ------------------------------------------------------------------------------------------ */
typedef enum lq_param_type {
    LQ_PT_INT   = 0,
    LQ_PT_FLOAT = 1,
    LQ_PT_BOOL  = 2,
    LQ_PT_STR   = 3,
    LQ_PT_SIZE  = 4 /* bytes, accepts suffixes K M G */
} lq_param_type;

typedef struct lq_param_info {
    const char *name;    /* key, snake_case */
    int         type;    /* lq_param_type */
    const char *def;     /* default as text ("" = unset) */
    double      min, max;/* numeric bounds (inclusive) */
    const char *families;/* comma list of option families ("gptq", "calib", "ppl", "*" = all):
                            a method takes the families its row declares, ppl / inspect /
                            convert are families of their own (lq_param_applies) */
    const char *choices; /* LQ_PT_STR: "|"-separated allowed values, or NULL = free text */
    const char *help;    /* one line */
} lq_param_info;

LQ_API int                  lq_param_count(void);
LQ_API const lq_param_info *lq_param_get_info(int i);
LQ_API const lq_param_info *lq_param_find(const char *name);
/* Whether option `info` applies to `command` (a method name, "ppl", "inspect", "convert"):
 * "*", a family the method declares, or the command itself among its families. */
LQ_API int                  lq_param_applies(const lq_param_info *info, const char *command);
/* The commands option `info` applies to, comma-separated into buf ("*" for every command; the
 * methods in table order, then ppl, inspect, convert). Returns the length it needed. */
LQ_API size_t               lq_param_commands(const lq_param_info *info, char *buf, size_t cap);

typedef struct lq_params lq_params;
LQ_API lq_params  *lq_params_create(void);
LQ_API void        lq_params_free(lq_params *p);
/* Validates type and bounds; LQ_ERR_INVALID_ARG with a message naming the key otherwise. */
LQ_API lq_status   lq_params_set(lq_params *p, const char *name, const char *value, lq_err *err);
/* Current value as text (the default when unset); NULL for an unknown key. */
LQ_API const char *lq_params_get(const lq_params *p, const char *name);

/* Progress and diagnostics callbacks (the library never prints). */
typedef struct lq_progress {
    const char *phase;  /* "calibrate", "layer", "write", "ppl", ... */
    int64_t     step;   /* 1-based current step */
    int64_t     total;  /* total steps (0 if unknown) */
    double      elapsed_s;
    double      eta_s;  /* < 0 if unknown */
    const char *detail; /* e.g. "model.layers.3" */
} lq_progress;

typedef enum lq_log_level { LQ_LOG_DEBUG = 0, LQ_LOG_INFO = 1, LQ_LOG_WARN = 2 } lq_log_level;

typedef struct lq_callbacks {
    /* Return non-zero to cancel (the job returns LQ_ERR_INTERRUPTED, output not created). */
    int (*progress)(const lq_progress *p, void *user);
    void (*log)(lq_log_level level, const char *msg, void *user);
    void *user;
} lq_callbacks;

/* Method names: "rtn", "gptq", "awq", "nf4", "int8". */
LQ_API int         lq_method_count(void);
LQ_API const char *lq_method_name(int i);
LQ_API const char *lq_method_help(int i);

/*
 * Quantize model_dir into out_dir (written to a temporary sibling directory and renamed into
 * place only when complete; model_dir is never modified). *report_json (may be NULL) receives a
 * JSON summary (free with lq_free) even on LQ_ERR_PPL_BOUND, where the output is written and
 * marked.
 * The "max_memory" budget counts the process's resident memory. Layer-sized buffers are
 * allocated and freed once per layer; with glibc's default (dynamic) mmap threshold they end up
 * on the heap and fragmentation keeps them resident. The library does not change process-wide
 * allocator settings: the llmquant program calls mallopt(M_MMAP_THRESHOLD, 4 MiB) at start, and
 * a program that relies on max_memory should do the same (or use an allocator that returns
 * large blocks).
 */
LQ_API lq_status lq_quantize(const char *method, const char *model_dir, const char *out_dir,
                             const lq_params *p, const lq_callbacks *cb, char **report_json,
                             lq_err *err);

/* A checkpoint -- a GGUF file (llama.cpp; types F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
 * Q2_K..Q6_K) or a float Hugging Face directory -- into a Hugging Face directory: config.json,
 * safetensors in p's "out_dtype" (float16, bfloat16, float32), tokenizer files (rebuilt from the
 * GGUF vocabulary), generation config. Same output discipline as lq_quantize. Every job API
 * below also accepts a .gguf file where it takes a model directory. */
LQ_API lq_status lq_convert(const char *model, const char *out_dir, const lq_params *p,
                            const lq_callbacks *cb, char **report_json, lq_err *err);

/* Remove what a job of this process writing out_dir left behind (its temporary directory, its
 * lock file): for a program abandoning a run from a signal handler (llmquant's SIGBUS handler
 * re-executes itself, keeping the pid, to call it). Never touches out_dir itself. */
LQ_API lq_status lq_output_discard(const char *out_dir);

/* Perplexity of a model directory (original or quantized) on a text file; JSON report. */
LQ_API lq_status lq_perplexity(const char *model_dir, const char *data_file, const lq_params *p,
                               const lq_callbacks *cb, char **report_json, lq_err *err);

/* Description of a model directory: tensors, dtypes, parameter count, memory per precision
 * including the KV cache for ctx/batch from p ("ctx", "batch"). JSON report. */
LQ_API lq_status lq_inspect(const char *model_dir, const lq_params *p, char **report_json,
                            lq_err *err);

#ifdef __cplusplus
}
#endif
#endif /* LLMQUANT_H */
