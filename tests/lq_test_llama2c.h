/* lq_test_llama2c.h -- an independent, deliberately plain port of Karpathy's llama2.c run.c
 * (checkpoint reader, transformer() one token at a time with a KV cache, bpe_encode) used as the
 * oracle for the HF-layout forward in quant/. Nothing here shares code with the library.
 *
 * Checkpoint ("v0" format): int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
 * (negative = separate classifier), seq_len; then float32 arrays in this order:
 * token_embedding [V, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim],
 * wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim],
 * w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim], freq_cis_real/imag
 * [seq_len, head_size/2] (unused), wcls [V, dim] only when vocab_size < 0.
 * q/k rows are in the original interleaved RoPE convention: pairs (2i, 2i+1) of each head
 * rotate together, with frequency 10000^(-2i/head_size).
 *
 * Tokenizer (.bin): int32 max_token_length, then per id: float32 score, int32 len, bytes. */
#ifndef LQ_TEST_LLAMA2C_H
#define LQ_TEST_LLAMA2C_H

#include "lq_dtype.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct l2c_model {
    int    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    float *data; /* the whole file after the header (owned) */
    float *emb, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3, *rms_final, *wcls;
    /* run state */
    float *x, *xb, *xb2, *hb, *hb2, *q, *k, *v, *att, *logits, *key_cache, *value_cache;
} l2c_model;

static inline void l2c_free(l2c_model *m) {
    float *bufs[] = {m->data, m->x,   m->xb,     m->xb2,       m->hb,         m->hb2, m->q,
                     m->k,    m->v,   m->att,    m->logits,    m->key_cache,  m->value_cache};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(m, 0, sizeof *m);
}

/* round_f16: pass every weight through fp16 (what the F16 safetensors export stored). */
static inline int l2c_load(const char *path, int round_f16, l2c_model *m) {
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int32_t hdr[7];
    if (fread(hdr, sizeof hdr, 1, f) != 1) {
        fclose(f);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, sizeof hdr, SEEK_SET);
    long nfloat = (size - (long)sizeof hdr) / 4;
    m->data     = malloc((size_t)nfloat * 4);
    if (!m->data || fread(m->data, 4, (size_t)nfloat, f) != (size_t)nfloat) {
        fclose(f);
        l2c_free(m);
        return -1;
    }
    fclose(f);
    m->dim = hdr[0], m->hidden_dim = hdr[1], m->n_layers = hdr[2], m->n_heads = hdr[3];
    m->n_kv_heads = hdr[4], m->vocab_size = abs(hdr[5]), m->seq_len = hdr[6];
    const int shared = hdr[5] > 0;
    if (round_f16)
        for (long i = 0; i < nfloat; i++)
            m->data[i] = lq_round_f16(m->data[i]);
    const long dim = m->dim, hid = m->hidden_dim, L = m->n_layers, hs = dim / m->n_heads;
    const long kv  = m->n_kv_heads * hs;
    float     *p   = m->data;
    m->emb         = p, p += m->vocab_size * dim;
    m->rms_att     = p, p += L * dim;
    m->wq          = p, p += L * dim * dim;
    m->wk          = p, p += L * kv * dim;
    m->wv          = p, p += L * kv * dim;
    m->wo          = p, p += L * dim * dim;
    m->rms_ffn     = p, p += L * dim;
    m->w1          = p, p += L * hid * dim;
    m->w2          = p, p += L * dim * hid;
    m->w3          = p, p += L * hid * dim;
    m->rms_final   = p, p += dim;
    p += m->seq_len * hs; /* freq_cis_real, freq_cis_imag: recomputed below as run.c does */
    m->wcls = shared ? m->emb : p;
    if (!shared)
        p += m->vocab_size * dim;
    if (p - m->data != nfloat) {
        l2c_free(m);
        return -2;
    }
    m->x           = calloc((size_t)dim, 4);
    m->xb          = calloc((size_t)dim, 4);
    m->xb2         = calloc((size_t)dim, 4);
    m->hb          = calloc((size_t)hid, 4);
    m->hb2         = calloc((size_t)hid, 4);
    m->q           = calloc((size_t)dim, 4);
    m->k           = calloc((size_t)kv, 4);
    m->v           = calloc((size_t)kv, 4);
    m->att         = calloc((size_t)m->n_heads * m->seq_len, 4);
    m->logits      = calloc((size_t)m->vocab_size, 4);
    m->key_cache   = calloc((size_t)(L * m->seq_len * kv), 4);
    m->value_cache = calloc((size_t)(L * m->seq_len * kv), 4);
    if (!m->value_cache || !m->key_cache || !m->logits || !m->att) {
        l2c_free(m);
        return -1;
    }
    return 0;
}

static inline void l2c_rmsnorm(float *o, const float *x, const float *w, int n) {
    float ss = 0.f;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    ss /= (float)n;
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < n; j++)
        o[j] = w[j] * (ss * x[j]);
}

static inline void l2c_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

/* xout[d] = W[d, n] x[n] */
static inline void l2c_matmul(float *xout, const float *x, const float *w, int n, int d) {
    for (int i = 0; i < d; i++) {
        float val = 0.f;
        for (int j = 0; j < n; j++)
            val += w[(long)i * n + j] * x[j];
        xout[i] = val;
    }
}

/* run.c transformer(): logits of the next token after `token` at position `pos` (the KV cache
 * must hold positions 0..pos-1 of the same sequence). */
static inline const float *l2c_forward(l2c_model *m, int token, int pos) {
    const int dim = m->dim, hid = m->hidden_dim, hs = dim / m->n_heads;
    const int kv_dim = m->n_kv_heads * hs, kv_mul = m->n_heads / m->n_kv_heads;
    float    *x      = m->x;
    memcpy(x, m->emb + (long)token * dim, (size_t)dim * 4);
    for (int l = 0; l < m->n_layers; l++) {
        l2c_rmsnorm(m->xb, x, m->rms_att + (long)l * dim, dim);
        l2c_matmul(m->q, m->xb, m->wq + (long)l * dim * dim, dim, dim);
        l2c_matmul(m->k, m->xb, m->wk + (long)l * dim * kv_dim, dim, kv_dim);
        l2c_matmul(m->v, m->xb, m->wv + (long)l * dim * kv_dim, dim, kv_dim);
        for (int i = 0; i < dim; i += 2) {
            const int   head_dim = i % hs;
            const float freq     = 1.0f / powf(10000.0f, (float)head_dim / (float)hs);
            const float val      = (float)pos * freq;
            const float fcr = cosf(val), fci = sinf(val);
            const int   rotn = i < kv_dim ? 2 : 1;
            for (int vi = 0; vi < rotn; vi++) {
                float      *vec = vi == 0 ? m->q : m->k;
                const float v0 = vec[i], v1 = vec[i + 1];
                vec[i]         = v0 * fcr - v1 * fci;
                vec[i + 1]     = v0 * fci + v1 * fcr;
            }
        }
        const long loff = (long)l * m->seq_len * kv_dim;
        memcpy(m->key_cache + loff + (long)pos * kv_dim, m->k, (size_t)kv_dim * 4);
        memcpy(m->value_cache + loff + (long)pos * kv_dim, m->v, (size_t)kv_dim * 4);
        for (int h = 0; h < m->n_heads; h++) {
            const float *q   = m->q + h * hs;
            float       *att = m->att + (long)h * m->seq_len;
            for (int t = 0; t <= pos; t++) {
                const float *k = m->key_cache + loff + (long)t * kv_dim + (h / kv_mul) * hs;
                float        score = 0.f;
                for (int i = 0; i < hs; i++)
                    score += q[i] * k[i];
                att[t] = score / sqrtf((float)hs);
            }
            l2c_softmax(att, pos + 1);
            float *xb = m->xb + h * hs;
            memset(xb, 0, (size_t)hs * 4);
            for (int t = 0; t <= pos; t++) {
                const float *v = m->value_cache + loff + (long)t * kv_dim + (h / kv_mul) * hs;
                for (int i = 0; i < hs; i++)
                    xb[i] += att[t] * v[i];
            }
        }
        l2c_matmul(m->xb2, m->xb, m->wo + (long)l * dim * dim, dim, dim);
        for (int i = 0; i < dim; i++)
            x[i] += m->xb2[i];
        l2c_rmsnorm(m->xb, x, m->rms_ffn + (long)l * dim, dim);
        l2c_matmul(m->hb, m->xb, m->w1 + (long)l * dim * hid, dim, hid);
        l2c_matmul(m->hb2, m->xb, m->w3 + (long)l * dim * hid, dim, hid);
        for (int i = 0; i < hid; i++)
            m->hb[i] = m->hb[i] * (1.0f / (1.0f + expf(-m->hb[i]))) * m->hb2[i];
        l2c_matmul(m->xb, m->hb, m->w2 + (long)l * dim * hid, hid, dim);
        for (int i = 0; i < dim; i++)
            x[i] += m->xb[i];
    }
    l2c_rmsnorm(x, x, m->rms_final, dim);
    l2c_matmul(m->logits, x, m->wcls, dim, m->vocab_size);
    return m->logits;
}

/* Sum of -log p(tokens[i+1] | tokens[..i]) over i in [first, n-1) of one sequence (double
 * log-softmax of run.c's float logits). */
static inline double l2c_seq_nll(l2c_model *m, const int32_t *tokens, int n, int first) {
    double nll = 0;
    for (int pos = 0; pos + 1 < n; pos++) {
        const float *lg = l2c_forward(m, tokens[pos], pos);
        if (pos < first)
            continue;
        double mx = lg[0];
        for (int i = 1; i < m->vocab_size; i++)
            mx = lg[i] > mx ? lg[i] : mx;
        double s = 0;
        for (int i = 0; i < m->vocab_size; i++)
            s += exp(lg[i] - mx);
        nll += mx + log(s) - lg[tokens[pos + 1]];
    }
    return nll;
}

/* ---------------------------------------------------------------------------------------- */
typedef struct l2c_tok_index {
    const char *str;
    int         id;
} l2c_tok_index;

typedef struct l2c_tok {
    int            n;
    char         **vocab;
    float         *scores;
    l2c_tok_index *sorted; /* run.c's sorted_vocab, for bsearch */
} l2c_tok;

static inline void l2c_tok_free(l2c_tok *t) {
    for (int i = 0; t->vocab && i < t->n; i++)
        free(t->vocab[i]);
    free(t->vocab);
    free(t->scores);
    free(t->sorted);
    memset(t, 0, sizeof *t);
}

static inline int l2c_cmp_index(const void *a, const void *b) {
    return strcmp(((const l2c_tok_index *)a)->str, ((const l2c_tok_index *)b)->str);
}

static inline int l2c_tok_load(const char *path, int vocab_size, l2c_tok *t) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int32_t maxlen;
    t->vocab  = calloc((size_t)vocab_size, sizeof(char *));
    t->scores = calloc((size_t)vocab_size, sizeof(float));
    int ok    = t->vocab && t->scores && fread(&maxlen, 4, 1, f) == 1;
    for (int i = 0; ok && i < vocab_size; i++) {
        int32_t len;
        ok = fread(&t->scores[i], 4, 1, f) == 1 && fread(&len, 4, 1, f) == 1 && len >= 0 &&
             len < 1024;
        if (ok) {
            t->vocab[i] = malloc((size_t)len + 1);
            ok          = t->vocab[i] && (len == 0 || fread(t->vocab[i], (size_t)len, 1, f) == 1);
            if (ok)
                t->vocab[i][len] = 0;
            t->n = i + 1;
        }
    }
    fclose(f);
    if (ok) {
        t->sorted = malloc((size_t)vocab_size * sizeof *t->sorted);
        ok        = t->sorted != NULL;
    }
    if (!ok) {
        l2c_tok_free(t);
        return -1;
    }
    for (int i = 0; i < vocab_size; i++)
        t->sorted[i] = (l2c_tok_index){t->vocab[i], i};
    qsort(t->sorted, (size_t)vocab_size, sizeof *t->sorted, l2c_cmp_index);
    return 0;
}

static inline int l2c_lookup(const l2c_tok *t, const char *s) {
    const l2c_tok_index key = {s, 0};
    const l2c_tok_index *r  = bsearch(&key, t->sorted, (size_t)t->n, sizeof key, l2c_cmp_index);
    return r ? r->id : -1;
}

/* run.c bpe_encode of text[len]: dummy prefix " ", one token per UTF-8 code point (or its bytes
 * + 3 as byte fallback), then repeatedly merge the adjacent pair whose concatenation is the
 * highest-scoring vocab entry. bos: prepend id 1. Returns a malloc'd array, *n its length. */
static inline int32_t *l2c_encode(const l2c_tok *t, const char *text, long len, int bos, int *n) {
    int32_t *tok = malloc(((size_t)len + 3) * sizeof(int32_t));
    char     buf[64], merged[2048];
    int      nt  = 0;
    if (!tok)
        return NULL;
    if (bos)
        tok[nt++] = 1;
    const int first = nt;
    tok[nt++]       = l2c_lookup(t, " ");
    size_t blen     = 0;
    for (long i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)text[i];
        if ((c & 0xC0) != 0x80)
            blen = 0;
        buf[blen++] = (char)c;
        buf[blen]   = 0;
        if (i + 1 < len && (((unsigned char)text[i + 1]) & 0xC0) == 0x80 && blen < 4)
            continue;
        const int id = l2c_lookup(t, buf);
        if (id >= 0)
            tok[nt++] = id;
        else
            for (size_t b = 0; b < blen; b++)
                tok[nt++] = (unsigned char)buf[b] + 3;
        blen = 0;
    }
    for (;;) {
        float best = -1e10f;
        int   best_id = -1, best_i = -1;
        for (int i = first; i + 1 < nt; i++) {
            const size_t la = strlen(t->vocab[tok[i]]), lb = strlen(t->vocab[tok[i + 1]]);
            if (la + lb >= sizeof merged)
                continue;
            memcpy(merged, t->vocab[tok[i]], la);
            memcpy(merged + la, t->vocab[tok[i + 1]], lb + 1);
            const int id = l2c_lookup(t, merged);
            if (id >= 0 && t->scores[id] > best) {
                best    = t->scores[id];
                best_id = id;
                best_i  = i;
            }
        }
        if (best_i < 0)
            break;
        tok[best_i] = best_id;
        memmove(tok + best_i + 1, tok + best_i + 2, (size_t)(nt - best_i - 2) * sizeof(int32_t));
        nt--;
    }
    *n = nt;
    return tok;
}

#endif
