/* bench_synth_model -- write a synthetic Llama checkpoint (random fp16 weights, HF layout) for
 * memory and speed measurements at real widths:
 *
 *   bench_synth_model OUT_DIR [--hidden 4096] [--intermediate 11008] [--layers 8] [--heads 32]
 *                     [--kv-heads 32] [--vocab 512] [--tokenizer tok512.bin] [--seed 1]
 *                     [--shard 2G]
 *
 * Weights ~ N(0, 1/sqrt(k)) per Linear so activations keep their scale through the layers;
 * norms are 1. The vocabulary defaults to 512 so stories260K's llama2.c tokenizer can be copied
 * next to it (--tokenizer) and calibration text tokenizes; Llama-7B shapes are
 * --hidden 4096 --intermediate 11008 --layers 32 --heads 32. */
#define _POSIX_C_SOURCE 200809L
#include "lq_dtype.h"
#include "lq_st.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fill(lq_st_writer *w, const char *name, int64_t n, int64_t k, float stdev, lq_rng *r,
                float *buf, lq_err *err) {
    int64_t shape[2] = {n, k};
    for (int64_t i = 0; i < n * k; i++)
        buf[i] = stdev > 0 ? stdev * lq_rng_normal(r) : 1.0f;
    /* stdev 0 marks a norm vector [n] of ones */
    return lq_st_writer_add_f32(w, name, LQ_DT_F16, stdev > 0 ? 2 : 1, shape, buf, err) != LQ_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR [--hidden H] [--intermediate I] [--layers L] "
                        "[--heads N] [--kv-heads K] [--vocab V] [--tokenizer FILE] [--seed S]\n",
                argv[0]);
        return 2;
    }
    const char *out = argv[1], *tok = NULL;
    int64_t     d = 4096, I = 11008, L = 8, nh = 32, nkv = 32, V = 512, seed = 1,
            shard = (int64_t)2 << 30;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--hidden"))
            d = atoll(v);
        else if (!strcmp(a, "--intermediate"))
            I = atoll(v);
        else if (!strcmp(a, "--layers"))
            L = atoll(v);
        else if (!strcmp(a, "--heads"))
            nh = atoll(v);
        else if (!strcmp(a, "--kv-heads"))
            nkv = atoll(v);
        else if (!strcmp(a, "--vocab"))
            V = atoll(v);
        else if (!strcmp(a, "--tokenizer"))
            tok = v;
        else if (!strcmp(a, "--seed"))
            seed = atoll(v);
        else if (!strcmp(a, "--shard"))
            shard = atoll(v) << 20;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    lq_err        err = {0};
    lq_st_writer *w   = NULL;
    lq_rng        r;
    lq_rng_seed(&r, (uint64_t)seed);
    int64_t hd = d / nh, kvd = hd * nkv, big = I > d ? I : d;
    float  *buf = malloc((size_t)(big * d > V * d ? big * d : V * d) * sizeof(float));
    char    name[256];
    if (!buf || lq_st_writer_create(out, shard, &w, &err) != LQ_OK) {
        fprintf(stderr, "%s: %s\n", out, err.msg[0] ? err.msg : "out of memory");
        return 1;
    }
    int bad = lq_st_writer_set_metadata(w, "format", "pt", &err) != LQ_OK;
    bad |= fill(w, "model.embed_tokens.weight", V, d, 1.0f, &r, buf, &err);
    for (int64_t l = 0; l < L && !bad; l++) {
        struct {
            const char *n;
            int64_t     rows, cols;
        } const lin[7] = {{"self_attn.q_proj", d, d},      {"self_attn.k_proj", kvd, d},
                          {"self_attn.v_proj", kvd, d},    {"self_attn.o_proj", d, d},
                          {"mlp.gate_proj", I, d},         {"mlp.up_proj", I, d},
                          {"mlp.down_proj", d, I}};
        for (int i = 0; i < 7 && !bad; i++) {
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, lin[i].n);
            bad |= fill(w, name, lin[i].rows, lin[i].cols, 1.0f / sqrtf((float)lin[i].cols), &r,
                        buf, &err);
        }
        snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)l);
        bad |= fill(w, name, d, 1, 0, &r, buf, &err);
        snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight",
                 (long long)l);
        bad |= fill(w, name, d, 1, 0, &r, buf, &err);
        fprintf(stderr, "\rlayer %lld/%lld", (long long)l + 1, (long long)L);
    }
    fprintf(stderr, "\n");
    bad |= fill(w, "model.norm.weight", d, 1, 0, &r, buf, &err);
    bad |= fill(w, "lm_head.weight", V, d, 1.0f / sqrtf((float)d), &r, buf, &err);
    if (!bad)
        bad = lq_st_writer_finish(w, &err) != LQ_OK;
    lq_st_writer_free(w);
    free(buf);
    if (bad) {
        fprintf(stderr, "%s: %s\n", out, err.msg);
        return 1;
    }
    snprintf(name, sizeof name, "%s/config.json", out);
    FILE *f = fopen(name, "w");
    if (!f)
        return 1;
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"vocab_size\": %lld,\n"
            "  \"max_position_embeddings\": 2048,\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": 10000.0,\n  \"tie_word_embeddings\": false,\n"
            "  \"hidden_act\": \"silu\",\n  \"torch_dtype\": \"float16\",\n"
            "  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n",
            (long long)d, (long long)I, (long long)L, (long long)nh, (long long)nkv, (long long)V);
    fclose(f);
    if (tok) { /* copy the tokenizer next to the weights */
        snprintf(name, sizeof name, "%s/tokenizer.bin", out);
        FILE *in = fopen(tok, "rb"), *o = fopen(name, "wb");
        if (!in || !o) {
            fprintf(stderr, "%s: cannot copy the tokenizer\n", tok);
            return 1;
        }
        char   b[65536];
        size_t n;
        while ((n = fread(b, 1, sizeof b, in)) > 0)
            if (fwrite(b, 1, n, o) != n)
                return 1;
        fclose(in);
        fclose(o);
    }
    printf("wrote %s: %lld layers, hidden %lld, intermediate %lld, heads %lld/%lld, vocab %lld\n",
           out, (long long)L, (long long)d, (long long)I, (long long)nh, (long long)nkv,
           (long long)V);
    return 0;
}
