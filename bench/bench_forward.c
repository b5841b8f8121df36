/* Forward throughput of the float32 CPU Llama forward (quant/model/lq_model*.c).
 *
 *   bench_forward [--model DIR] [--tokens N] [--seqlen L] [--threads T] [--reps R]
 *                 [--synthetic-only | --no-synthetic]
 *
 * 1. A real checkpoint (default $LQ_SHARED/models/stories260K, or --model): N tokens as N/L
 *    sequences of L tokens through every layer and the lm_head, best of R runs (3).
 * 2. A synthetic Llama-2-7B-shaped model with 2 layers (hidden 4096, intermediate 11008,
 *    32 heads, vocab 32000, random weights): same measurement, plus achieved GFLOP/s.
 * Prints tokens/s (embedding to logits), the split between layers and lm_head, and peak RSS. */
#include "bench_blas.h"
#include "lq_base.h"
#include "lq_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct timing {
    double layers_s, head_s;
} timing;

static lq_status run(const lq_model *m, int64_t ntok, int64_t seqlen, int threads, int reps,
                     timing *best, lq_err *err) {
    const int64_t nseq = ntok / seqlen, T = nseq * seqlen, d = m->cfg.hidden_size;
    float        *h = lq_aligned_alloc((size_t)(T * d) * sizeof(float));
    /* logits a chunk at a time: at a conversion's calibration size (128 x 2048 tokens) all of
     * them would not fit in memory */
    const int64_t LC  = T < 4096 ? T : 4096;
    float        *lg  = lq_aligned_alloc((size_t)(LC * m->cfg.vocab_size) * sizeof(float));
    int32_t      *ids = malloc((size_t)T * sizeof(int32_t));
    lq_fwd_ws    *ws  = NULL;
    lq_status     st  = LQ_OK;
    lq_rng        rng;
    lq_rng_seed(&rng, 7);
    if (!h || !lg || !ids)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "bench: out of memory for %lld tokens", (long long)T);
    for (int64_t i = 0; i < T; i++)
        ids[i] = (int32_t)lq_rng_below(&rng, (uint64_t)m->cfg.vocab_size);
    const int64_t max_tokens = T < 4096 ? T : (4096 / seqlen) * seqlen;
    LQ_TRY_GOTO(
        lq_fwd_ws_create(&m->cfg, max_tokens > seqlen ? max_tokens : seqlen, seqlen, &ws, err));
    lq_fwd_ws_set_threads(ws, threads);
    best->layers_s = best->head_s = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = lq_now();
        LQ_TRY_GOTO(lq_model_embed(m, ids, T, h, err));
        for (int64_t l = 0; l < m->cfg.num_layers; l++)
            LQ_TRY_GOTO(
                lq_layer_forward(m, &m->layers[l], h, nseq, seqlen, NULL, NULL, -1, ws, err));
        double t1 = lq_now();
        for (int64_t t = 0; t < T; t += LC)
            LQ_TRY_GOTO(lq_model_logits(m, h + t * d, T - t < LC ? T - t : LC, lg, ws, err));
        double t2      = lq_now();
        best->layers_s = t1 - t0 < best->layers_s ? t1 - t0 : best->layers_s;
        best->head_s   = t2 - t1 < best->head_s ? t2 - t1 : best->head_s;
    }
    printf("  workspace %.1f MiB for %lld-token chunks\n", (double)lq_fwd_ws_bytes(ws) / (1 << 20),
           (long long)lq_fwd_ws_max_tokens(ws));
done:
    lq_fwd_ws_free(ws);
    lq_aligned_free(h);
    lq_aligned_free(lg);
    free(ids);
    return st;
}

/* Multiply-adds x2 per token: linears + attention (QK^T and PV over the causal half on
 * average) + lm_head. */
static double flops_per_token(const lq_model_config *c, int64_t seqlen) {
    double lin = 0;
    for (int l = 0; l < LQ_LIN_COUNT; l++) {
        int64_t n, k;
        lq_lin_shape(c, (lq_lin_id)l, &n, &k);
        lin += (double)n * (double)k;
    }
    const double attn = 2.0 * (double)c->num_heads * (double)c->head_dim * (double)seqlen / 2.0;
    return 2.0 *
           ((lin + attn) * (double)c->num_layers + (double)c->vocab_size * (double)c->hidden_size);
}

static void report(const char *name, const lq_model *m, int64_t ntok, int64_t seqlen,
                   const timing *t) {
    const int64_t T   = ntok / seqlen * seqlen;
    const double  tot = t->layers_s + t->head_s;
    printf("%s: %lld tokens (%lld x %lld): %.1f tokens/s end to end (layers %.3f s, lm_head "
           "%.3f s), %.1f GFLOP/s, peak RSS %.1f MiB\n",
           name, (long long)T, (long long)(ntok / seqlen), (long long)seqlen, (double)T / tot,
           t->layers_s, t->head_s, flops_per_token(&m->cfg, seqlen) * (double)T / tot * 1e-9,
           (double)lq_peak_rss_bytes() / (1 << 20));
}

static lq_status synthetic(int64_t ntok, int64_t seqlen, int threads, lq_err *err) {
    lq_model_config c = {0};
    strcpy(c.model_type, "llama");
    c.hidden_size             = 4096;
    c.intermediate_size       = 11008;
    c.num_layers              = 2;
    c.num_heads               = 32;
    c.num_kv_heads            = 32;
    c.head_dim                = 128;
    c.vocab_size              = 32000;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps            = 1e-5;
    c.rope_theta              = 10000;
    c.tie_word_embeddings     = 0;
    lq_model *m               = NULL;
    LQ_TRY(lq_model_create(&c, &m, err));
    lq_rng rng;
    lq_rng_seed(&rng, 42);
    m->layers    = lq_calloc_n(c.num_layers, sizeof *m->layers);
    lq_status st = m->layers ? LQ_OK : lq_fail(err, LQ_ERR_NOMEM, "bench: out of memory");
    for (int64_t l = 0; st == LQ_OK && l < c.num_layers; l++) {
        st = lq_layer_alloc_dense(&c, l, &m->layers[l], err);
        for (int i = 0; st == LQ_OK && i < LQ_LIN_COUNT; i++) {
            const lq_qlinear *q = &m->layers[l].lin[i].buf.q;
            float            *w = lq_linear_dense_mut(&m->layers[l].lin[i]);
            const float       s = 1.0f / sqrtf((float)q->k);
            for (int64_t j = 0; j < q->n * q->k; j++)
                w[j] = s * lq_rng_normal(&rng);
        }
    }
    float *head = lq_linear_dense_mut(&m->lm_head);
    for (int64_t j = 0; st == LQ_OK && j < c.vocab_size * c.hidden_size; j++) {
        m->embed[j] = lq_rng_normal(&rng);
        head[j]     = 0.02f * lq_rng_normal(&rng);
    }
    timing t;
    if (st == LQ_OK)
        st = run(m, ntok, seqlen, threads, 2, &t, err);
    if (st == LQ_OK)
        report("synthetic 4096-wide, 2 layers, vocab 32000", m, ntok, seqlen, &t);
    lq_model_free(m);
    return st;
}

int main(int argc, char **argv) {
    bench_blas_reexec(argv);
    const char *model = NULL;
    int64_t     ntok = 0, seqlen = 0;
    int         threads = 0, synth_only = 0, no_synth = 0, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            ntok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seqlen") && i + 1 < argc)
            seqlen = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--synthetic-only"))
            synth_only = 1;
        else if (!strcmp(argv[i], "--no-synthetic"))
            no_synth = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--model DIR] [--tokens N] [--seqlen L] [--threads T] "
                    "[--reps R] [--synthetic-only | --no-synthetic]\n",
                    argv[0]);
            return 2;
        }
    }
    reps = reps > 0 ? reps : 1;
    char   def[4096];
    lq_err err = {0};
    if (!model && getenv("LQ_SHARED")) {
        snprintf(def, sizeof def, "%s/models/stories260K", getenv("LQ_SHARED"));
        model = def;
    }
    if (!synth_only && model) {
        lq_model *m  = NULL;
        lq_status st = lq_model_open(model, &m, &err);
        if (st == LQ_OK)
            st = lq_model_load_all(m, &err);
        int64_t L = seqlen > 0 ? seqlen : 512;
        if (m && L > m->cfg.max_position_embeddings)
            L = m->cfg.max_position_embeddings;
        timing t;
        if (st == LQ_OK)
            st = run(m, ntok > 0 ? ntok : 8 * L, L, threads, reps, &t, &err);
        if (st == LQ_OK)
            report(model, m, ntok > 0 ? ntok : 8 * L, L, &t);
        lq_model_free(m);
        if (st != LQ_OK) {
            fprintf(stderr, "error: %s: %s\n", lq_status_name(st), err.msg);
            return 1;
        }
    }
    if (no_synth)
        return 0;
    const lq_status st =
        synthetic(ntok > 0 ? ntok : 1024, seqlen > 0 ? seqlen : 512, threads, &err);
    if (st != LQ_OK) {
        fprintf(stderr, "error: %s: %s\n", lq_status_name(st), err.msg);
        return 1;
    }
    return 0;
}
