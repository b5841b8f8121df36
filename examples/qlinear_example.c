/* Example: link the installed llmquant through pkg-config and run one quantized linear layer of
 * a checkpoint written by llmquant (or AutoGPTQ / AutoAWQ / bitsandbytes).
 *
 *   cc -std=c11 qlinear_example.c $(pkg-config --cflags --libs llmquant) -o qlinear_example
 *   ./qlinear_example OUT_DIR [MODULE] [M]
 *
 * Runs y = x W^T for M random rows with lq_qlinear_forward_cpu, checks it against the
 * dequantized weights, and, when a CUDA device is present, runs lq_qlinear_forward_cuda too. */
#include <llmquant.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fmt_name(lq_format f) {
    static const char *const n[] = {"dense", "gptq", "awq", "nf4", "int8"};
    return (f >= 0 && f < LQ_FMT_COUNT) ? n[f] : "?";
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CHECKPOINT_DIR [MODULE] [M]\n", argv[0]);
        return 2;
    }
    if (lq_version() != LQ_VERSION_NUMBER)
        fprintf(stderr, "note: header %s, library %s\n", LQ_VERSION_STRING, lq_version_string());
    lq_checkpoint *ck  = NULL;
    lq_err         err = {0};
    lq_status      s   = lq_checkpoint_open(argv[1], &ck, &err);
    if (s != LQ_OK) {
        fprintf(stderr, "error %s: %s\n", lq_status_name(s), err.msg);
        return (int)s;
    }
    if (lq_checkpoint_num_linears(ck) == 0) {
        fprintf(stderr, "%s: no linear layers\n", argv[1]);
        return 1;
    }
    const char *name = argc > 2 ? argv[2] : lq_checkpoint_linear_name(ck, 0);
    int64_t     m    = argc > 3 ? atoll(argv[3]) : 4;
    lq_qlinear  w;
    if ((s = lq_checkpoint_get_linear(ck, name, &w, &err)) != LQ_OK) {
        fprintf(stderr, "error %s: %s\n", lq_status_name(s), err.msg);
        return (int)s;
    }
    printf("%s: %s, %d-bit, [%lld x %lld], group %lld, %zu bytes\n", name,
           fmt_name((lq_format)w.format), w.bits, (long long)w.n, (long long)w.k,
           (long long)w.group_size, lq_qlinear_bytes(&w));

    float *x  = malloc(sizeof(float) * (size_t)(m * w.k));
    float *y  = malloc(sizeof(float) * (size_t)(m * w.n));
    float *wd = malloc(sizeof(float) * (size_t)(w.n * w.k));
    srand(1);
    for (int64_t i = 0; i < m * w.k; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    size_t ws_size = lq_qlinear_workspace_cpu(&w, m);
    void  *ws      = ws_size ? aligned_alloc(64, (ws_size + 63) / 64 * 64) : NULL;
    if ((s = lq_qlinear_forward_cpu(&w, x, m, y, ws, ws_size, 0)) != LQ_OK ||
        (s = lq_qlinear_dequant_cpu(&w, wd, 0)) != LQ_OK) {
        fprintf(stderr, "error %s\n", lq_status_name(s));
        return (int)s;
    }
    /* Reference from the dequantized weights (bias included by the forward). */
    double max_err = 0, max_ref = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < w.n; j++) {
            double ref = 0;
            for (int64_t c = 0; c < w.k; c++)
                ref += (double)x[r * w.k + c] * wd[j * w.k + c];
            if (w.bias) { /* fp16 bias */
                unsigned h = w.bias[j], e = (h >> 10) & 31, f = h & 1023;
                double   b = e ? ldexp(1024 + f, (int)e - 25) : ldexp(f, -24);
                ref += (h & 0x8000) ? -b : b;
            }
            max_err = fmax(max_err, fabs(ref - y[r * w.n + j]));
            max_ref = fmax(max_ref, fabs(ref));
        }
    printf("cpu: y[0][0..3] = %.5f %.5f %.5f %.5f, max |y - x.dequant(W)^T| = %.3g (max |y| %.3g)\n",
           y[0], w.n > 1 ? y[1] : 0, w.n > 2 ? y[2] : 0, w.n > 3 ? y[3] : 0, max_err, max_ref);
    /* LLM.int8 also quantizes the activations (row-wise int8), so it is compared loosely. */
    double tol = (w.format == LQ_FMT_INT8 ? 1e-2 : 1e-3) * (1 + max_ref);
    int    ok  = max_err <= tol;

    int ndev = 0;
    lq_cuda_device_count(&ndev);
    printf("cuda devices: %d%s\n", ndev, ndev ? "" : " (CPU only)");
    free(x), free(y), free(wd), free(ws);
    lq_checkpoint_close(ck);
    printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}
