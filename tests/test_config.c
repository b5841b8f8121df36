/* config.json: the real stories260K config field by field, and each bad config's status. */
#include "lq_config.h"
#include "lq_base.h"
#include "lq_test.h"
#include "lq_test_status.h"

#include <math.h>
#include <dirent.h>

/* Oracle mode for tests/py/test_config_oracle.py: parse <dir>/config.json, print the fields
 * as "key value" lines (transformers' view of the same file is compared there). */
static int dump(const char *dir) {
    lq_model_config c;
    lq_err          err = {0};
    lq_status       s   = lq_config_load(dir, &c, &err);
    if (s != LQ_OK) {
        printf("status %s\n", lq_status_name(s));
        return 0;
    }
    printf("status LQ_OK\nmodel_type %s\nhidden_size %lld\nintermediate_size %lld\n"
           "num_hidden_layers %lld\nnum_attention_heads %lld\nnum_key_value_heads %lld\n"
           "head_dim %lld\nvocab_size %lld\nmax_position_embeddings %lld\nrms_norm_eps %.17g\n"
           "rope_theta %.17g\nrope_type %s\n",
           c.model_type, (long long)c.hidden_size, (long long)c.intermediate_size,
           (long long)c.num_layers, (long long)c.num_heads, (long long)c.num_kv_heads,
           (long long)c.head_dim, (long long)c.vocab_size, (long long)c.max_position_embeddings,
           c.rms_norm_eps, c.rope_theta,
           c.rope_type == LQ_ROPE_LLAMA3     ? "llama3"
           : c.rope_type == LQ_ROPE_LINEAR   ? "linear"
           : c.rope_type == LQ_ROPE_LONGROPE ? "longrope"
                                             : "default");
    if (c.rope_type == LQ_ROPE_LINEAR || c.rope_type == LQ_ROPE_LLAMA3)
        printf("factor %.17g\n", c.rope_factor);
    if (c.rope_type == LQ_ROPE_LONGROPE) {
        printf("attention_factor %.17g\noriginal_max_position_embeddings %lld\n",
               c.rope_attn_factor, (long long)c.rope_original_max_pos);
        const float *f[2] = {c.rope_short, c.rope_long};
        for (int w = 0; w < 2; w++) {
            printf("%s", w ? "long_factor " : "short_factor ");
            for (int64_t j = 0; j < c.head_dim / 2; j++)
                printf("%s%.9g", j ? "," : "", (double)f[w][j]);
            putchar('\n');
        }
    }
    if (c.rope_type == LQ_ROPE_LLAMA3)
        printf("low_freq_factor %.17g\nhigh_freq_factor %.17g\n"
               "original_max_position_embeddings %lld\n",
               c.rope_low_freq_factor, c.rope_high_freq_factor, (long long)c.rope_original_max_pos);
    printf("tie_word_embeddings %d\nattention_bias %d\nqkv_bias %d\nqk_norm %d\nmlp_bias %d\n"
           "sliding_window %lld\nbos_token_id %lld\neos_token_id %lld\n",
           c.tie_word_embeddings, c.attention_bias, c.qkv_bias, c.qk_norm, c.mlp_bias,
           (long long)c.sliding_window, (long long)c.bos_token_id, (long long)c.eos_token_id);
    printf("act %s\nnorm_plus_one %d\npost_norms %d\nembed_scale %.17g\nattn_scale %.17g\n"
           "attn_softcap %.17g\nfinal_softcap %.17g\nrope_local_theta %.17g\nfused %d\nlayers ",
           c.act == LQ_ACT_GELU_TANH ? "gelu_tanh" : "silu", c.norm_plus_one, c.post_norms,
           c.embed_scale, c.attn_scale, c.attn_softcap, c.final_softcap, c.rope_local_theta,
           c.fused);
    for (int64_t i = 0; i < c.num_layers; i++)
        putchar(lq_config_layer_sliding(&c, i) ? 'S' : 'F');
    putchar('\n');
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--dump") == 0)
        return dump(argv[2]);
    const char     *data = lq_test_env_or_skip("LQ_TEST_DATA");
    const char     *sh   = getenv("LQ_SHARED");
    lq_model_config c;
    lq_err          err = {0};
    char            p[4096];
    snprintf(p, sizeof p, "%s/models/stories260K", sh ? sh : "/nonexistent");
    if (!lq_dir_exists(p))
        printf("SKIP part: %s not available, real config not checked\n", p);
    else {
        CHECK_OK(lq_config_load(p, &c, &err));
        CHECK(strcmp(c.model_type, "llama") == 0);
        CHECK(strcmp(c.architecture, "LlamaForCausalLM") == 0);
        CHECK(strcmp(c.torch_dtype, "float16") == 0);
        CHECK_EQ_INT(c.hidden_size, 64);
        CHECK_EQ_INT(c.intermediate_size, 172);
        CHECK_EQ_INT(c.num_layers, 5);
        CHECK_EQ_INT(c.num_heads, 8);
        CHECK_EQ_INT(c.num_kv_heads, 4);
        CHECK_EQ_INT(c.head_dim, 8);
        CHECK_EQ_INT(c.vocab_size, 512);
        CHECK_EQ_INT(c.max_position_embeddings, 512);
        CHECK_NEAR(c.rms_norm_eps, 1e-5, 0);
        CHECK_NEAR(c.rope_theta, 10000.0, 0);
        CHECK_EQ_INT(c.rope_type, LQ_ROPE_DEFAULT);
        CHECK_EQ_INT(c.tie_word_embeddings, 1);
        CHECK_EQ_INT(c.attention_bias, 0);
        CHECK_EQ_INT(c.mlp_bias, 0);
        CHECK_EQ_INT(c.qkv_bias, 0);
        CHECK_EQ_INT(c.bos_token_id, 1);
        CHECK_EQ_INT(c.eos_token_id, 2);
        CHECK_EQ_INT(c.quantized, 0);
    }
    /* Llama-3.1 style rope scaling, Qwen2 bias, head_dim, eos list */
    const char *l31 =
        "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4096,"
        "\"intermediate_size\":14336,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
        "\"num_key_value_heads\":8,\"vocab_size\":128256,\"max_position_embeddings\":131072,"
        "\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
        "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,\"rope_type\":"
        "\"llama3\"},\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":\"bfloat16\"}";
    CHECK_OK(lq_config_parse(l31, strlen(l31), "l31", &c, &err));
    CHECK_EQ_INT(c.rope_type, LQ_ROPE_LLAMA3);
    CHECK_NEAR(c.rope_factor, 8.0, 0);
    CHECK_EQ_INT(c.rope_original_max_pos, 8192);
    CHECK_EQ_INT(c.eos_token_id, 128001);
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 0);
    const char *qw =
        "{\"model_type\":\"qwen2\",\"hidden_size\":896,\"intermediate_size\":4864,"
        "\"num_hidden_layers\":24,\"num_attention_heads\":14,\"num_key_value_heads\":2,"
        "\"vocab_size\":151936,\"head_dim\":64,\"sliding_window\":32768,"
        "\"quantization_config\":{\"quant_method\":\"gptq\"}}";
    CHECK_OK(lq_config_parse(qw, strlen(qw), "qw", &c, &err));
    CHECK_EQ_INT(c.qkv_bias, 1);
    CHECK_EQ_INT(c.attention_bias, 0);
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK_EQ_INT(c.sliding_window, 0); /* Qwen2 uses it only with use_sliding_window */
    CHECK_EQ_INT(c.quantized, 1);
    CHECK(strcmp(c.architecture, "") == 0);
    const char *qw_sw = "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,"
                        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,"
                        "\"use_sliding_window\":true,\"sliding_window\":4096}";
    /* layers >= max_window_layers (default 28) would slide: only 2 layers here, none do */
    CHECK_OK(lq_config_parse(qw_sw, strlen(qw_sw), "qw_sw", &c, &err));
    CHECK_EQ_INT(c.sliding_window, 0);
    CHECK_EQ_INT(c.num_kv_heads, 4); /* defaults to num_attention_heads */
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.max_position_embeddings, 32768); /* Qwen2Config default */
    const char *qw_mix = "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":128,"
                         "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"vocab_size\":100,"
                         "\"use_sliding_window\":true,\"sliding_window\":4096,"
                         "\"max_window_layers\":2}";
    CHECK_EQ_INT(lq_config_parse(qw_mix, strlen(qw_mix), "qw_mix", &c, &err),
                 LQ_ERR_UNSUPPORTED_ARCH);
    /* Gemma 3 as the Hub ships google/gemma-3-270m (transformers 4.5x keys): one full layer in
     * six, two RoPE bases, (1 + w) norms, scaled embeddings, GeGLU, tied */
    const char *g3 =
        "{\"architectures\":[\"Gemma3ForCausalLM\"],\"_sliding_window_pattern\":6,"
        "\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"eos_token_id\":1,"
        "\"final_logit_softcapping\":null,\"head_dim\":256,\"hidden_activation\":"
        "\"gelu_pytorch_tanh\",\"hidden_size\":640,\"intermediate_size\":2048,"
        "\"max_position_embeddings\":32768,\"model_type\":\"gemma3_text\",\"num_attention_heads\":"
        "4,"
        "\"num_hidden_layers\":18,\"num_key_value_heads\":1,\"query_pre_attn_scalar\":256,"
        "\"rms_norm_eps\":1e-06,\"rope_local_base_freq\":10000.0,\"rope_scaling\":null,"
        "\"rope_theta\":1000000.0,\"sliding_window\":512,\"vocab_size\":262144}";
    CHECK_OK(lq_config_parse(g3, strlen(g3), "g3", &c, &err));
    CHECK(c.norm_plus_one && c.post_norms && c.qk_norm && c.tie_word_embeddings);
    CHECK_EQ_INT(c.act, LQ_ACT_GELU_TANH);
    CHECK_NEAR(c.embed_scale, sqrt(640.0), 1e-12);
    CHECK_NEAR(c.attn_scale, 1.0 / 16, 1e-15);
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_NEAR(c.rope_local_theta, 1e4, 0);
    CHECK_EQ_INT(c.sliding_window, 512);
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0);
    for (int64_t i = 0; i < 18; i++)
        CHECK_MSG(lq_config_layer_sliding(&c, i) == ((i + 1) % 6 != 0), "layer %lld", (long long)i);
    /* transformers 5: per-layer-type rope_parameters, layer_types; linear scaling on full only */
    const char *g3v5 =
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,"
        "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":1,"
        "\"head_dim\":32,\"query_pre_attn_scalar\":32,\"vocab_size\":512,\"sliding_window\":16,"
        "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\"],"
        "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":2.0,"
        "\"rope_theta\":1000000.0},\"sliding_attention\":{\"rope_type\":\"default\","
        "\"rope_theta\":100.0}}}";
    CHECK_OK(lq_config_parse(g3v5, strlen(g3v5), "g3v5", &c, &err));
    CHECK(c.rope_type == LQ_ROPE_LINEAR && c.rope_factor == 2.0 && c.rope_theta == 1e6 &&
          c.rope_local_theta == 100.0);
    CHECK(lq_config_layer_sliding(&c, 0) && lq_config_layer_sliding(&c, 1) &&
          !lq_config_layer_sliding(&c, 2));
    CHECK_EQ_INT(c.bos_token_id, 2); /* Gemma3TextConfig defaults */
    CHECK_EQ_INT(c.eos_token_id, 1);
    /* a layer_types list that is not periodic, and an embedding model: refused */
    const char *g3np =
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"vocab_size\":512,"
        "\"layer_types\":[\"full_attention\",\"sliding_attention\",\"full_attention\","
        "\"full_attention\"]}";
    CHECK_EQ_INT(lq_config_parse(g3np, strlen(g3np), "g3np", &c, &err), LQ_ERR_UNSUPPORTED_ARCH);
    CHECK(strstr(err.msg, "periodic") != NULL);
    const char *g3bi =
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":64,\"intermediate_size\":96,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"vocab_size\":512,"
        "\"use_bidirectional_attention\":true}";
    CHECK_EQ_INT(lq_config_parse(g3bi, strlen(g3bi), "g3bi", &c, &err), LQ_ERR_UNSUPPORTED_ARCH);
    /* Gemma 2 (google/gemma-2-2b): alternating layers starting sliding, soft-capping defaults */
    const char *g2 =
        "{\"architectures\":[\"Gemma2ForCausalLM\"],\"attn_logit_softcapping\":50.0,"
        "\"final_logit_softcapping\":30.0,\"head_dim\":256,\"hidden_act\":\"gelu_pytorch_tanh\","
        "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":2304,"
        "\"intermediate_size\":9216,\"max_position_embeddings\":8192,\"model_type\":\"gemma2\","
        "\"num_attention_heads\":8,\"num_hidden_layers\":26,\"num_key_value_heads\":4,"
        "\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,"
        "\"sliding_window\":4096,\"vocab_size\":256000}";
    CHECK_OK(lq_config_parse(g2, strlen(g2), "g2", &c, &err));
    CHECK(c.attn_softcap == 50.0 && c.final_softcap == 30.0 && !c.qk_norm && c.post_norms);
    CHECK(lq_config_layer_sliding(&c, 0) && !lq_config_layer_sliding(&c, 1) &&
          lq_config_layer_sliding(&c, 24) && !lq_config_layer_sliding(&c, 25));
    CHECK(c.rope_local_theta == 0 && c.tie_word_embeddings);
    /* RoPE over part of each head is refused, at the top level or in the RoPE dict */
    const char *prf[2] = {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":1,"
                          "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
                          "\"partial_rotary_factor\":0.5}",
                          "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":1,"
                          "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
                          "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e4,"
                          "\"partial_rotary_factor\":0.75}}"};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(lq_config_parse(prf[i], strlen(prf[i]), "prf", &c, &err),
                     LQ_ERR_UNSUPPORTED_ARCH);
        CHECK(strstr(err.msg, "partial_rotary_factor") != NULL);
    }
    /* Phi-3: fused linears; LongRoPE lists of head_dim / 2 (here 8) factors; no biases */
    const char *phi[4] = {
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,1],"
        "\"long_factor\":[2,2,2,2,2,2,2,2]},\"max_position_embeddings\":16384}",
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1],"
        "\"long_factor\":[2,2,2,2,2,2,2,2]}}",
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,-1],"
        "\"long_factor\":[2,2,2,2,2,2,2,2]}}",
        "{\"model_type\":\"phi3\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"attention_bias\":true}"};
    CHECK_OK(lq_config_parse(phi[0], strlen(phi[0]), "phi", &c, &err));
    CHECK(c.fused && c.rope_type == LQ_ROPE_LONGROPE && c.rope_original_max_pos == 4096 &&
          c.rope_short[7] == 1.0f && c.rope_long[0] == 2.0f && c.rms_norm_eps == 1e-5 &&
          c.eos_token_id == 32000 && c.sliding_window == 0);
    CHECK(fabs(c.rope_attn_factor - sqrt(1 + log(4.0) / log(4096.0))) < 1e-12);
    for (int i = 1; i < 3; i++) {
        CHECK_EQ_INT(lq_config_parse(phi[i], strlen(phi[i]), "phi", &c, &err), LQ_ERR_CONFIG_VALUE);
        CHECK(strstr(err.msg, "short_factor") != NULL);
    }
    CHECK_EQ_INT(lq_config_parse(phi[3], strlen(phi[3]), "phi", &c, &err), LQ_ERR_UNSUPPORTED_ARCH);
    /* mixture of experts: Mixtral-8x7B's and Qwen3-30B-A3B's and Qwen1.5-MoE-A2.7B's fields,
     * either key for the expert count, dense layers among the sparse ones refused */
    const char *moe[6] = {
        "{\"architectures\":[\"MixtralForCausalLM\"],\"model_type\":\"mixtral\","
        "\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"
        "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"vocab_size\":32000,"
        "\"max_position_embeddings\":32768,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
        "\"rope_theta\":1e6,\"sliding_window\":null,\"rms_norm_eps\":1e-5}",
        "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\","
        "\"hidden_size\":2048,\"intermediate_size\":6144,\"num_hidden_layers\":48,"
        "\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,"
        "\"vocab_size\":151936,\"num_experts\":128,\"num_experts_per_tok\":8,"
        "\"moe_intermediate_size\":768,\"norm_topk_prob\":true,\"decoder_sparse_step\":1,"
        "\"mlp_only_layers\":[],\"max_position_embeddings\":40960,\"rope_theta\":1e6}",
        "{\"model_type\":\"qwen2_moe\",\"hidden_size\":2048,\"intermediate_size\":5632,"
        "\"num_hidden_layers\":24,\"num_attention_heads\":16,\"vocab_size\":151936,"
        "\"num_experts\":60,\"num_experts_per_tok\":4,\"moe_intermediate_size\":1408,"
        "\"shared_expert_intermediate_size\":5632}",
        "{\"model_type\":\"qwen2_moe\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"mlp_only_layers\":[1]}",
        "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"num_experts\":8,\"num_local_experts\":4}",
        "{\"model_type\":\"mixtral\",\"hidden_size\":64,\"intermediate_size\":8,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":9,"
        "\"num_local_experts\":2,\"num_experts_per_tok\":3}"};
    CHECK_OK(lq_config_parse(moe[0], strlen(moe[0]), "mixtral", &c, &err));
    CHECK(c.num_experts == 8 && c.experts_per_tok == 2 && c.moe_intermediate == 14336 &&
          c.norm_topk && c.moe_mixtral && c.shared_intermediate == 0 && c.sliding_window == 0 &&
          c.rope_theta == 1e6 && c.bos_token_id == 1);
    CHECK_OK(lq_config_parse(moe[1], strlen(moe[1]), "qwen3_moe", &c, &err));
    CHECK(c.num_experts == 128 && c.experts_per_tok == 8 && c.moe_intermediate == 768 &&
          c.norm_topk && !c.moe_mixtral && c.qk_norm && c.head_dim == 128 && !c.qkv_bias);
    CHECK_OK(lq_config_parse(moe[2], strlen(moe[2]), "qwen2_moe", &c, &err));
    CHECK(c.num_experts == 60 && c.experts_per_tok == 4 && c.moe_intermediate == 1408 &&
          c.shared_intermediate == 5632 && !c.norm_topk && c.qkv_bias && c.num_kv_heads == 16);
    CHECK_EQ_INT(lq_config_parse(moe[3], strlen(moe[3]), "moe", &c, &err), LQ_ERR_UNSUPPORTED_ARCH);
    CHECK(strstr(err.msg, "mlp_only_layers") != NULL);
    CHECK_EQ_INT(lq_config_parse(moe[4], strlen(moe[4]), "moe", &c, &err), LQ_ERR_CONFIG_VALUE);
    CHECK(strstr(err.msg, "disagree") != NULL);
    CHECK_EQ_INT(lq_config_parse(moe[5], strlen(moe[5]), "moe", &c, &err), LQ_ERR_CONFIG_VALUE);
    CHECK(strstr(err.msg, "num_experts_per_tok") != NULL);
    /* every family says what its tests check (llmquant inspect prints it) */
    const char *fams[] = {"llama",       "mistral", "qwen2",   "qwen3",     "gemma2",
                          "gemma3_text", "phi3",    "mixtral", "qwen2_moe", "qwen3_moe"};
    for (size_t i = 0; i < sizeof fams / sizeof *fams; i++) {
        const char *v = lq_config_family_verified(fams[i]);
        CHECK_MSG(v && strstr(v, "transformers"), "%s: no verification note", fams[i]);
    }
    CHECK(lq_config_family_verified("gpt_neox") == NULL);
    /* "su" is longrope only where Phi3Config says so */
    const char *su = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":1,"
                     "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
                     "\"rope_scaling\":{\"type\":\"su\",\"short_factor\":[1,1,1,1,1,1,1,1],"
                     "\"long_factor\":[2,2,2,2,2,2,2,2]}}";
    CHECK_EQ_INT(lq_config_parse(su, strlen(su), "su", &c, &err), LQ_ERR_UNSUPPORTED_ARCH);
    /* not Gemma: no post norms, plain norms, every layer as before */
    const char *ll1 = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":1,"
                      "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9}";
    CHECK_OK(lq_config_parse(ll1, strlen(ll1), "ll1", &c, &err));
    CHECK(!c.norm_plus_one && !c.post_norms && c.embed_scale == 1.0 && c.attn_scale == 0 &&
          c.act == LQ_ACT_SILU && !c.tie_word_embeddings);
    const char *mi_def = "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":1,"
                         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9}";
    CHECK_OK(lq_config_parse(mi_def, strlen(mi_def), "mi_def", &c, &err));
    CHECK_EQ_INT(c.sliding_window, 4096); /* MistralConfig default when the key is absent */
    const char *mi = "{\"model_type\":\"mistral\",\"architectures\":[\"MistralForCausalLM\"],"
                     "\"hidden_size\":5120,\"intermediate_size\":14336,\"num_hidden_layers\":40,"
                     "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"head_dim\":128,"
                     "\"vocab_size\":131072,\"sliding_window\":4096,\"rope_theta\":1000000.0,"
                     "\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"bos_token_id\":null}";
    CHECK_OK(lq_config_parse(mi, strlen(mi), "mi", &c, &err));
    CHECK_EQ_INT(c.sliding_window, 4096);
    CHECK_EQ_INT(c.head_dim, 128); /* head_dim key wins over 5120 / 32 = 160 */
    const char *mi_null = "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":1,"
                          "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
                          "\"sliding_window\":null}";
    CHECK_OK(lq_config_parse(mi_null, strlen(mi_null), "mi_null", &c, &err));
    CHECK_EQ_INT(c.sliding_window, 0);
    CHECK_OK(lq_config_parse(mi, strlen(mi), "mi", &c, &err));
    CHECK_NEAR(c.rope_theta, 1e6, 0);
    CHECK_EQ_INT(c.rope_type, LQ_ROPE_DEFAULT);
    CHECK_EQ_INT(c.bos_token_id, -1);
    /* llama: sliding_window means nothing; attention_bias / mlp_bias honoured; linear rope;
     * explicit head_dim makes hidden % heads irrelevant */
    const char *ll = "{\"model_type\":\"llama\",\"hidden_size\":100,\"intermediate_size\":128,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":8,\"head_dim\":16,"
                     "\"vocab_size\":100,\"sliding_window\":64,\"attention_bias\":true,"
                     "\"mlp_bias\":true,\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}}";
    CHECK_OK(lq_config_parse(ll, strlen(ll), "ll", &c, &err));
    CHECK_EQ_INT(c.sliding_window, 0);
    CHECK_EQ_INT(c.attention_bias, 1);
    CHECK_EQ_INT(c.mlp_bias, 1);
    CHECK_EQ_INT(c.qkv_bias, 0);
    CHECK_EQ_INT(c.head_dim, 16);
    CHECK_EQ_INT(c.rope_type, LQ_ROPE_LINEAR);
    CHECK_NEAR(c.rope_factor, 4.0, 0);
    /* transformers >= 5 writes rope_parameters with rope_theta inside */
    const char *l5 = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,"
                     "\"max_position_embeddings\":4096,\"rope_parameters\":{\"rope_type\":"
                     "\"llama3\",\"rope_theta\":500000.0,\"factor\":32.0,\"low_freq_factor\":1.0,"
                     "\"high_freq_factor\":4.0}}";
    CHECK_OK(lq_config_parse(l5, strlen(l5), "l5", &c, &err));
    CHECK_EQ_INT(c.rope_type, LQ_ROPE_LLAMA3);
    CHECK_NEAR(c.rope_theta, 500000.0, 0);
    CHECK_NEAR(c.rope_factor, 32.0, 0);
    CHECK_NEAR(c.rope_high_freq_factor, 4.0, 0);
    CHECK_EQ_INT(c.rope_original_max_pos, 4096); /* defaults to max_position_embeddings */
    const char *nested = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":1,"
                         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":9,"
                         "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"}}}";
    CHECK_EQ_INT(lq_config_parse(nested, strlen(nested), "nested", &c, &err),
                 LQ_ERR_UNSUPPORTED_ARCH);
    const char *neox = "{\"model_type\":\"gpt_neox\"}";
    CHECK_EQ_INT(lq_config_parse(neox, strlen(neox), "config.json", &c, &err),
                 LQ_ERR_UNSUPPORTED_ARCH);
    CHECK(strcmp(err.msg, "config.json: model_type \"gpt_neox\" is not supported (supported: "
                          "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, phi3, mixtral, "
                          "qwen2_moe, qwen3_moe)") == 0);

    /* the config transformers 5 itself wrote (tests/data/st/make_st.py) */
    snprintf(p, sizeof p, "%s/st/hf_tiny_sharded", data);
    CHECK_OK(lq_config_load(p, &c, &err));
    CHECK(strcmp(c.torch_dtype, "bfloat16") == 0); /* transformers 5 spells it "dtype" */
    CHECK_EQ_INT(c.hidden_size, 16);
    CHECK_EQ_INT(c.intermediate_size, 40);
    CHECK_EQ_INT(c.num_layers, 2);
    CHECK_EQ_INT(c.num_heads, 4);
    CHECK_EQ_INT(c.num_kv_heads, 2);
    CHECK_EQ_INT(c.head_dim, 4);
    CHECK_EQ_INT(c.vocab_size, 48);
    CHECK_EQ_INT(c.tie_word_embeddings, 0);
    CHECK_NEAR(c.rope_theta, 10000.0, 0);
    CHECK_NEAR(c.rms_norm_eps, 1e-5, 0);

    snprintf(p, sizeof p, "%s/bad", data);
    DIR *d = opendir(p);
    CHECK(d != NULL);
    int            n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "cfg_", 4) != 0)
            continue;
        int  want = lq_test_expected_status(de->d_name);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", p, de->d_name);
        int got = lq_config_load(dir, &c, &err);
        CHECK_MSG(got == want, "%s: got %s (%s)", de->d_name, lq_status_name(got), err.msg);
        CHECK_MSG(strstr(err.msg, "config.json") != NULL, "%s: message '%s'", de->d_name, err.msg);
        n++;
    }
    if (d)
        closedir(d);
    CHECK(n >= 20);
    CHECK_EQ_INT(lq_config_load("/nonexistent/model", &c, &err), LQ_ERR_NOT_FOUND);
    CHECK(strstr(err.msg, "gpt_neox") == NULL);
    return lq_test_end("config");
}
