/* config.json: the real stories260K config field by field, and each bad config's status. */
#include "lq_config.h"
#include "lq_test.h"
#include "lq_test_status.h"

#include <dirent.h>

int main(void) {
    const char     *data = lq_test_env_or_skip("LQ_TEST_DATA");
    const char     *sh   = getenv("LQ_SHARED");
    lq_model_config c;
    lq_err          err = {0};
    char            p[4096];
    if (sh) {
        snprintf(p, sizeof p, "%s/models/stories260K", sh);
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
    const char *qw = "{\"model_type\":\"qwen2\",\"hidden_size\":896,\"intermediate_size\":4864,"
                     "\"num_hidden_layers\":24,\"num_attention_heads\":14,\"num_key_value_heads\":2,"
                     "\"vocab_size\":151936,\"head_dim\":64,\"sliding_window\":32768,"
                     "\"quantization_config\":{\"quant_method\":\"gptq\"}}";
    CHECK_OK(lq_config_parse(qw, strlen(qw), "qw", &c, &err));
    CHECK_EQ_INT(c.qkv_bias, 1);
    CHECK_EQ_INT(c.head_dim, 64);
    CHECK_EQ_INT(c.sliding_window, 32768);
    CHECK_EQ_INT(c.quantized, 1);

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
    CHECK(n >= 9);
    CHECK_EQ_INT(lq_config_load("/nonexistent/model", &c, &err), LQ_ERR_NOT_FOUND);
    CHECK(strstr(err.msg, "gpt_neox") == NULL);
    return lq_test_end("config");
}
