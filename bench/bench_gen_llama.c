/* bench_gen_llama -- writes a synthetic Llama checkpoint (random fp16 weights, Hugging Face
 * layout: config.json + model.safetensors) for memory and speed measurements at real widths
 * without downloading a model. The tokenizer is the caller's business (copy a llama2.c
 * tok512.bin next to it; vocab must match).
 *
 * Usage: bench_gen_llama OUT_DIR [--hidden 4096] [--layers 8] [--intermediate 11008]
 *                        [--heads 32] [--kv-heads 32] [--vocab 512] [--seed 1]
 */
#include "lq_st.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static lq_status add_random(lq_st_writer *w, lq_rng *r, const char *name, int64_t rows,
                            int64_t cols, float std, float *buf, lq_err *err) {
    for (int64_t i = 0; i < rows * cols; i++)
        buf[i] = std * lq_rng_normal(r);
    int64_t shape[2] = {rows, cols};
    return lq_st_writer_add_f32(w, name, LQ_DT_F16, 2, shape, buf, err);
}

int main(int argc, char **argv) {
    int64_t hidden = 4096, layers = 8, inter = 11008, heads = 32, kvh = 32, vocab = 512, seed = 1;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s OUT_DIR [--hidden N] [--layers N] [--intermediate N] "
                        "[--heads N] [--kv-heads N] [--vocab N] [--seed N]\n", argv[0]);
        return 2;
    }
    const char *out = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        int64_t v = strtoll(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--hidden"))
            hidden = v;
        else if (!strcmp(argv[i], "--layers"))
            layers = v;
        else if (!strcmp(argv[i], "--intermediate"))
            inter = v;
        else if (!strcmp(argv[i], "--heads"))
            heads = v;
        else if (!strcmp(argv[i], "--kv-heads"))
            kvh = v;
        else if (!strcmp(argv[i], "--vocab"))
            vocab = v;
        else if (!strcmp(argv[i], "--seed"))
            seed = v;
        else {
            fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create %s\n", argv[0], out);
        return 1;
    }
    int64_t hd = hidden / heads;
    char    path[4096];
    snprintf(path, sizeof path, "%s/config.json", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s\n", argv[0], path);
        return 1;
    }
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n"
            "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
            "  \"num_key_value_heads\": %lld,\n  \"vocab_size\": %lld,\n"
            "  \"max_position_embeddings\": 2048,\n  \"rms_norm_eps\": 1e-05,\n"
            "  \"rope_theta\": 10000.0,\n  \"hidden_act\": \"silu\",\n"
            "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
            "  \"torch_dtype\": \"float16\"\n}\n",
            (long long)hidden, (long long)inter, (long long)layers, (long long)heads,
            (long long)kvh, (long long)vocab);
    fclose(f);

    lq_err        err = {0};
    lq_st_writer *w   = NULL;
    lq_rng        r;
    lq_rng_seed(&r, (uint64_t)seed);
    int64_t big  = inter > vocab ? inter : vocab;
    float  *buf  = malloc((size_t)(big * hidden) * sizeof(float));
    float   std  = 0.02f;
    lq_status st = buf ? lq_st_writer_create(out, 0, &w, &err) : LQ_ERR_NOMEM;
    char      nm[256];
    if (st == LQ_OK)
        st = add_random(w, &r, "model.embed_tokens.weight", vocab, hidden, 1.0f, buf, &err);
    for (int64_t l = 0; l < layers && st == LQ_OK; l++) {
        struct {
            const char *n;
            int64_t     rows, cols;
        } lin[] = {{"self_attn.q_proj", heads * hd, hidden}, {"self_attn.k_proj", kvh * hd, hidden},
                   {"self_attn.v_proj", kvh * hd, hidden},   {"self_attn.o_proj", hidden, heads * hd},
                   {"mlp.gate_proj", inter, hidden},          {"mlp.up_proj", inter, hidden},
                   {"mlp.down_proj", hidden, inter}};
        for (int j = 0; j < 7 && st == LQ_OK; j++) {
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.weight", (long long)l, lin[j].n);
            st = add_random(w, &r, nm, lin[j].rows, lin[j].cols, std, buf, &err);
        }
        for (int j = 0; j < 2 && st == LQ_OK; j++) {
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.weight", (long long)l,
                     j ? "post_attention_layernorm" : "input_layernorm");
            for (int64_t c = 0; c < hidden; c++)
                buf[c] = 1.0f;
            st = lq_st_writer_add_f32(w, nm, LQ_DT_F16, 1, &hidden, buf, &err);
        }
    }
    if (st == LQ_OK) {
        for (int64_t c = 0; c < hidden; c++)
            buf[c] = 1.0f;
        st = lq_st_writer_add_f32(w, "model.norm.weight", LQ_DT_F16, 1, &hidden, buf, &err);
    }
    if (st == LQ_OK)
        st = lq_st_writer_finish(w, &err);
    lq_st_writer_free(w);
    free(buf);
    if (st != LQ_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg[0] ? err.msg : "out of memory");
        return 1;
    }
    return 0;
}
