/* The HF-layout forward (quant/lq_model.c) against an independent port of llama2.c run.c's
 * forward on the original stories260K.bin checkpoint: different weight file (fp32, interleaved
 * RoPE layout), different code path (token by token with a KV cache). The HF file holds the
 * same weights rounded to fp16, with q/k rows permuted to rotate-half. */
#include "lq_model.h"
#include "lq_test.h"

#include <math.h>

typedef struct l2c {
    int    dim, hidden, nl, nh, nkv, vocab, seq;
    float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_f, *wcls;
    float *data;
} l2c;

static int l2c_load(const char *path, l2c *m, int round_f16) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int hdr[7];
    if (fread(hdr, 4, 7, f) != 7) {
        fclose(f);
        return -1;
    }
    m->dim = hdr[0], m->hidden = hdr[1], m->nl = hdr[2], m->nh = hdr[3], m->nkv = hdr[4];
    m->vocab = abs(hdr[5]), m->seq = hdr[6];
    fseek(f, 0, SEEK_END);
    long n = (ftell(f) - 28) / 4;
    fseek(f, 28, SEEK_SET);
    m->data = malloc((size_t)n * 4);
    if (fread(m->data, 4, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return -1;
    }
    fclose(f);
    if (round_f16)
        for (long i = 0; i < n; i++)
            m->data[i] = lq_round_f16(m->data[i]);
    int    hd = m->dim / m->nh;
    float *p  = m->data;
#define TAKE(x, cnt)                                                                           \
    m->x = p;                                                                                  \
    p += (long)(cnt)
    TAKE(emb, m->vocab * m->dim);
    TAKE(rms_att, m->nl * m->dim);
    TAKE(wq, (long)m->nl * m->dim * m->dim);
    TAKE(wk, (long)m->nl * m->nkv * hd * m->dim);
    TAKE(wv, (long)m->nl * m->nkv * hd * m->dim);
    TAKE(wo, (long)m->nl * m->dim * m->dim);
    TAKE(rms_ffn, m->nl * m->dim);
    TAKE(w1, (long)m->nl * m->hidden * m->dim);
    TAKE(w2, (long)m->nl * m->dim * m->hidden);
    TAKE(w3, (long)m->nl * m->hidden * m->dim);
    TAKE(rms_f, m->dim);
#undef TAKE
    m->wcls = hdr[5] > 0 ? m->emb : p + m->seq * hd; /* skip legacy freq_cis */
    return 0;
}

static void rmsnorm(float *o, const float *x, const float *w, int n) {
    float ss = 0;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    ss = 1.0f / sqrtf(ss / n + 1e-5f);
    for (int j = 0; j < n; j++)
        o[j] = w[j] * (ss * x[j]);
}

static void matmul(float *o, const float *x, const float *w, int n, int d) {
    for (int i = 0; i < d; i++) {
        float v = 0;
        for (int j = 0; j < n; j++)
            v += w[(long)i * n + j] * x[j];
        o[i] = v;
    }
}

/* run.c forward for tokens[0..T), logits [T, vocab]. */
static void l2c_forward(const l2c *m, const int *tok, int T, float *logits) {
    int    dim = m->dim, hd = dim / m->nh, kvd = m->nkv * hd, hid = m->hidden;
    float *x = calloc(dim, 4), *xb = calloc(dim, 4), *xb2 = calloc(dim, 4), *q = calloc(dim, 4);
    float *hb = calloc(hid, 4), *hb2 = calloc(hid, 4), *att = calloc(T, 4);
    float *kc = calloc((size_t)m->nl * T * kvd, 4), *vc = calloc((size_t)m->nl * T * kvd, 4);
    for (int pos = 0; pos < T; pos++) {
        memcpy(x, m->emb + (long)tok[pos] * dim, dim * 4);
        for (int l = 0; l < m->nl; l++) {
            rmsnorm(xb, x, m->rms_att + l * dim, dim);
            float *k = kc + ((long)l * T + pos) * kvd, *v = vc + ((long)l * T + pos) * kvd;
            matmul(q, xb, m->wq + (long)l * dim * dim, dim, dim);
            matmul(k, xb, m->wk + (long)l * kvd * dim, dim, kvd);
            matmul(v, xb, m->wv + (long)l * kvd * dim, dim, kvd);
            for (int i = 0; i < dim; i += 2) { /* interleaved RoPE, as run.c */
                int   hdi = i % hd;
                float fr  = 1.0f / powf(10000.0f, hdi / (float)hd), val = pos * fr;
                float fcr = cosf(val), fci = sinf(val);
                for (int w = 0; w < (i < kvd ? 2 : 1); w++) {
                    float *vec = w == 0 ? q : k, v0 = vec[i], v1 = vec[i + 1];
                    vec[i]     = v0 * fcr - v1 * fci;
                    vec[i + 1] = v0 * fci + v1 * fcr;
                }
            }
            for (int h = 0; h < m->nh; h++) {
                int    kvh = h / (m->nh / m->nkv);
                float *qh  = q + h * hd;
                for (int t = 0; t <= pos; t++) {
                    float s = 0, *kt = kc + ((long)l * T + t) * kvd + kvh * hd;
                    for (int i = 0; i < hd; i++)
                        s += qh[i] * kt[i];
                    att[t] = s / sqrtf((float)hd);
                }
                float mx = att[0], sum = 0;
                for (int t = 1; t <= pos; t++)
                    mx = att[t] > mx ? att[t] : mx;
                for (int t = 0; t <= pos; t++)
                    sum += (att[t] = expf(att[t] - mx));
                float *o = xb + h * hd;
                memset(o, 0, hd * 4);
                for (int t = 0; t <= pos; t++)
                    for (int i = 0; i < hd; i++)
                        o[i] += att[t] / sum * vc[((long)l * T + t) * kvd + kvh * hd + i];
            }
            matmul(xb2, xb, m->wo + (long)l * dim * dim, dim, dim);
            for (int i = 0; i < dim; i++)
                x[i] += xb2[i];
            rmsnorm(xb, x, m->rms_ffn + l * dim, dim);
            matmul(hb, xb, m->w1 + (long)l * hid * dim, dim, hid);
            matmul(hb2, xb, m->w3 + (long)l * hid * dim, dim, hid);
            for (int i = 0; i < hid; i++)
                hb[i] = hb[i] / (1.0f + expf(-hb[i])) * hb2[i];
            matmul(xb, hb, m->w2 + (long)l * dim * hid, hid, dim);
            for (int i = 0; i < dim; i++)
                x[i] += xb[i];
        }
        rmsnorm(xb, x, m->rms_f, dim);
        matmul(logits + (long)pos * m->vocab, xb, m->wcls, dim, m->vocab);
    }
    free(x), free(xb), free(xb2), free(q), free(hb), free(hb2), free(att), free(kc), free(vc);
}

typedef struct cap_stats {
    int     calls[LQ_LIN_COUNT];
    int64_t rows[LQ_LIN_COUNT];
} cap_stats;

static lq_status cap(void *u, lq_lin_id id, const float *x, int64_t t, int64_t k) {
    cap_stats *s = u;
    (void)x, (void)k;
    s->calls[id]++;
    s->rows[id] += t;
    return LQ_OK;
}

int main(void) {
    const char *sh = lq_test_env_or_skip("LQ_SHARED");
    char        p[4096];
    snprintf(p, sizeof p, "%s/models/stories260K/llama2c/stories260K.bin", sh);
    l2c ref16, ref32;
    if (l2c_load(p, &ref16, 1) || l2c_load(p, &ref32, 0)) {
        printf("SKIP: cannot read %s\n", p);
        return 77;
    }
    snprintf(p, sizeof p, "%s/models/stories260K", sh);
    lq_model *m   = NULL;
    lq_err    err = {0};
    CHECK_OK(lq_model_open(p, &m, &err));
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    CHECK_OK(lq_model_load_all(m, &err));
    enum { T = 96, NSEQ = 2 };
    int     tok[NSEQ][T];
    lq_rng  rng;
    lq_rng_seed(&rng, 42);
    for (int s = 0; s < NSEQ; s++)
        for (int t = 0; t < T; t++)
            tok[s][t] = t == 0 ? 1 : (int)lq_rng_below(&rng, 512);
    int64_t    d = m->cfg.hidden_size, V = m->cfg.vocab_size;
    float     *h = malloc(sizeof(float) * NSEQ * T * d), *lg = malloc(sizeof(float) * NSEQ * T * V);
    float     *r16 = malloc(sizeof(float) * T * V), *r32 = malloc(sizeof(float) * T * V);
    lq_fwd_ws *ws = NULL;
    CHECK_OK(lq_fwd_ws_create(&m->cfg, NSEQ * T, T, &ws, &err));
    CHECK_OK(lq_model_embed(m, &tok[0][0], NSEQ * T, h, &err));
    for (int l = 0; l < m->cfg.num_layers; l++)
        CHECK_OK(lq_layer_forward(m, &m->layers[l], h, NSEQ, T, NULL, NULL, -1, ws, &err));
    CHECK_OK(lq_model_logits(m, h, NSEQ * T, lg, ws, &err));
    double max16 = 0, max32 = 0, scale = 0;
    for (int s = 0; s < NSEQ; s++) {
        l2c_forward(&ref16, tok[s], T, r16);
        l2c_forward(&ref32, tok[s], T, r32);
        for (long i = 0; i < (long)T * V; i++) {
            double a = lg[(long)s * T * V + i];
            max16    = fmax(max16, fabs(a - r16[i]));
            max32    = fmax(max32, fabs(a - r32[i]));
            scale    = fmax(scale, fabs(r16[i]));
        }
    }
    printf("max |logit diff| vs llama2.c port: %.3g (fp16-rounded weights), %.3g (fp32 .bin); "
           "max |logit| %.3g\n",
           max16, max32, scale);
    CHECK(max16 < 1e-3);
    CHECK(max32 < 0.05); /* the HF file is fp16: this bounds the conversion error */

    /* Capture hook: inputs of every linear, once per chunk; stop_after leaves h untouched. */
    float *h2 = malloc(sizeof(float) * NSEQ * T * d);
    CHECK_OK(lq_model_embed(m, &tok[0][0], NSEQ * T, h2, &err));
    memcpy(h, h2, sizeof(float) * NSEQ * T * d);
    cap_stats seen = {{0}, {0}};
    CHECK_OK(lq_layer_forward(m, &m->layers[0], h2, NSEQ, T, cap, &seen, LQ_LIN_O, ws, &err));
    CHECK(memcmp(h, h2, sizeof(float) * NSEQ * T * d) == 0);
    CHECK_EQ_INT(seen.rows[LQ_LIN_Q], NSEQ * T);
    CHECK_EQ_INT(seen.rows[LQ_LIN_O], NSEQ * T);
    CHECK_EQ_INT(seen.calls[LQ_LIN_GATE], 0);
    lq_fwd_ws_free(ws);
    lq_model_free(m);
    free(h), free(h2), free(lg), free(r16), free(r32), free(ref16.data), free(ref32.data);
    return lq_test_end("forward");
}

