/* Fuzz config.json parsing (depth pre-scan, cJSON, typed getters, validation), its
 * quantization_config (every format's keys, GPTQ's "dynamic" rules: regular expressions from
 * the file, compiled and matched) and the lq_json getters on arbitrary values. Accepted configs
 * must satisfy what the model code assumes (heads, RoPE tables, LongRoPE factors,
 * mixture-of-experts sizes; widths a GPTQ kernel has). */
#include "lq_config.h"
#include "lq_qformat.h"
#include "lq_json.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lq_model_config cfg;
    lq_err          err = {0};
    lq_status       s   = lq_config_parse((const char *)data, size, "fuzz", &cfg, &err);
    if (s == LQ_OK) {
        if (cfg.hidden_size < 1 || cfg.num_heads < 1 || cfg.num_kv_heads < 1 ||
            cfg.num_heads % cfg.num_kv_heads || cfg.head_dim < 2 || cfg.head_dim % 2 ||
            cfg.rope_type < LQ_ROPE_DEFAULT || cfg.rope_type > LQ_ROPE_LONGROPE ||
            !(cfg.rope_theta > 0) || !(cfg.rms_norm_eps > 0) || cfg.sliding_window < 0 ||
            memchr(cfg.model_type, 0, sizeof cfg.model_type) == NULL)
            abort();
        if (cfg.rope_type == LQ_ROPE_LONGROPE) { /* the RoPE tables divide by these */
            if (!(cfg.rope_attn_factor > 0) || cfg.rope_original_max_pos < 1 ||
                cfg.head_dim / 2 > LQ_ROPE_MAX_HALF)
                abort();
            for (int64_t j = 0; j < cfg.head_dim / 2; j++)
                if (!(cfg.rope_short[j] > 0) || !(cfg.rope_long[j] > 0))
                    abort();
        }
        /* experts: the router picks experts_per_tok of num_experts; the forward sizes its rows by
         * the expert and shared-expert widths */
        if (cfg.num_experts &&
            (cfg.experts_per_tok < 1 || cfg.experts_per_tok > cfg.num_experts ||
             cfg.num_experts > 4096 || cfg.moe_intermediate < 1 || cfg.shared_intermediate < 0 ||
             (cfg.shared_intermediate && cfg.moe_mixtral)))
            abort();
        if (!cfg.num_experts && (cfg.experts_per_tok || cfg.moe_intermediate))
            abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }

    cJSON *root = NULL;
    if (lq_json_parse((const char *)data, size, "fuzz", &root, &err) != LQ_OK)
        return 0;
    lq_qconfig qc;
    memset(&err, 0, sizeof err);
    if (lq_qconfig_parse(root, "fuzz", &qc, &err) == LQ_OK) {
        static const char *const mods[] = {"model.layers.0.self_attn.q_proj",
                                           "model.layers.17.mlp.down_proj", "lm_head", ""};
        for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
            lq_qconfig e;
            int        ex = -1;
            if (lq_qconfig_for_module(&qc, mods[i], &e, &ex, &err) != LQ_OK)
                continue; /* out of memory */
            if ((ex != 0 && ex != 1) || e.dynamic ||
                (qc.format == LQ_FMT_GPTQ &&
                 (!(e.bits == 2 || e.bits == 3 || e.bits == 4 || e.bits == 8) ||
                  e.group_size == 0)))
                abort();
        }
        lq_qconfig_free(&qc);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    const cJSON *kv;
    cJSON_ArrayForEach(kv, root) {
        if (!kv->string)
            continue; /* array element */
        int64_t i = 7;
        double  d = 0;
        int     b = 0;
        char    buf[8];
        if (lq_json_get_i64(root, kv->string, 1, -5, 1000, &i, "fuzz", &err) == LQ_OK &&
            (i < -5 || i > 1000))
            abort();
        (void)lq_json_get_f64(root, kv->string, 1, &d, "fuzz", &err);
        (void)lq_json_get_bool(root, kv->string, 0, &b, "fuzz", &err);
        if (lq_json_get_str(root, kv->string, 1, buf, sizeof buf, "fuzz", &err) == LQ_OK &&
            memchr(buf, 0, sizeof buf) == NULL)
            abort();
    }
    cJSON_Delete(root);
    return 0;
}
