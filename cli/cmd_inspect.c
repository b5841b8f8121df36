/* llmquant inspect MODEL_DIR [--ctx N --batch B --group-size G --tensors] -> lq_inspect.
 * --json prints the library report (which always lists every tensor); the human summary is
 * rendered here from that report. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

const cli_flag cli_inspect_flags[] = {
    {"tensors", 0, NULL, 0, "list every tensor (name, dtype, shape, bytes)"},
    {NULL, 0, NULL, 0, NULL},
};

static void fmt_count(double n, char *buf, size_t cap) {
    if (n >= 1e9)
        snprintf(buf, cap, "%.0f (%.2fB)", n, n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, cap, "%.0f (%.2fM)", n, n / 1e6);
    else if (n >= 1e3)
        snprintf(buf, cap, "%.0f (%.1fK)", n, n / 1e3);
    else
        snprintf(buf, cap, "%.0f", n);
}

static void human(FILE *f, const cJSON *r, int list_tensors) {
    char b1[64], b2[64], b3[64], b4[64];
    fprintf(f, "model       %s\n", cli_jstr(r, "model_dir"));
    fprintf(f, "arch        %s (%s), dtype %s\n", cli_jstr(r, "model_type"),
            cli_jstr(r, "architecture"),
            *cli_jstr(r, "torch_dtype") ? cli_jstr(r, "torch_dtype") : "unspecified");
    fprintf(f,
            "shape       %.0f layers, hidden %.0f, intermediate %.0f, heads %.0f (kv %.0f, "
            "head_dim %.0f), vocab %.0f, context %.0f%s\n",
            cli_jnum(r, "num_layers"), cli_jnum(r, "hidden_size"), cli_jnum(r, "intermediate_size"),
            cli_jnum(r, "num_heads"), cli_jnum(r, "num_kv_heads"), cli_jnum(r, "head_dim"),
            cli_jnum(r, "vocab_size"), cli_jnum(r, "max_position_embeddings"),
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "tie_word_embeddings"))
                ? ", tied embeddings"
                : "");
    const cJSON *blk = cJSON_GetObjectItemCaseSensitive(r, "block");
    if (blk) {
        const double sl = cli_jnum(blk, "sliding_layers"), nl = cli_jnum(r, "num_layers");
        fprintf(f, "block       %s MLP, RoPE base %g", cli_jstr(blk, "mlp"),
                cli_jnum(blk, "rope_theta"));
        if (cli_jnum(blk, "rope_local_theta") > 0)
            fprintf(f, " (sliding layers %g)", cli_jnum(blk, "rope_local_theta"));
        if (!strcmp(cli_jstr(blk, "rope_scaling"), "longrope"))
            fprintf(f, " with longrope (short factors up to %.0f tokens, attention factor %.4g)",
                    cli_jnum(blk, "rope_original_max_pos"), cli_jnum(blk, "rope_attention_factor"));
        else if (*cli_jstr(blk, "rope_scaling"))
            fprintf(f, " with %s scaling x%g", cli_jstr(blk, "rope_scaling"),
                    cli_jnum(blk, "rope_factor"));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "fused_qkv_gate_up")))
            fprintf(f, ", fused qkv_proj and gate_up_proj");
        if (cli_jnum(blk, "experts") > 0) {
            fprintf(f, ", %.0f experts of %.0f (top %.0f%s)", cli_jnum(blk, "experts"),
                    cli_jnum(blk, "expert_intermediate"), cli_jnum(blk, "experts_per_token"),
                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "renormalized_top_k"))
                        ? ", renormalized"
                        : "");
            if (cli_jnum(blk, "shared_expert_intermediate") > 0)
                fprintf(f, " and a gated shared expert of %.0f",
                        cli_jnum(blk, "shared_expert_intermediate"));
        }
        if (sl > 0)
            fprintf(f, ", sliding window %.0f on %.0f of %.0f layers",
                    cli_jnum(blk, "sliding_window"), sl, nl);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "qk_norm")))
            fprintf(f, ", q/k norms");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "post_norms")))
            fprintf(f, ", post norms");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(blk, "norm_plus_one")))
            fprintf(f, ", (1 + w) norms");
        if (cli_jnum(blk, "attn_softcap") > 0)
            fprintf(f, ", attention soft-cap %g", cli_jnum(blk, "attn_softcap"));
        if (cli_jnum(blk, "final_softcap") > 0)
            fprintf(f, ", logit soft-cap %g", cli_jnum(blk, "final_softcap"));
        fprintf(f, "\n");
    }
    if (*cli_jstr(r, "family_verified"))
        fprintf(f, "verified    %s\n", cli_jstr(r, "family_verified"));
    fmt_count(cli_jnum(r, "parameters"), b1, sizeof b1);
    cli_fmt_bytes(cli_jnum(r, "tensor_bytes"), b2, sizeof b2);
    fprintf(f, "parameters  %s in %.0f tensors, %s on disk (", b1, cli_jnum(r, "num_tensors"), b2);
    const cJSON *dts = cJSON_GetObjectItemCaseSensitive(r, "dtypes");
    for (const cJSON *d = dts ? dts->child : NULL; d; d = d->next)
        fprintf(f, "%s%s x%.0f", d == dts->child ? "" : ", ", d->string, cli_jnum(d, "tensors"));
    fprintf(f, ")\n");
    const cJSON *ql = cJSON_GetObjectItemCaseSensitive(r, "quantized_linears");
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(r, "quantization_config");
    if (cli_jnum(ql, "count") > 0 || qc) {
        const char *qm = cli_jstr(qc, "quant_method");
        fprintf(f, "quantized   %s", *qm ? qm : "yes");
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(qc, "bits")))
            fprintf(f, " %.0f-bit", cli_jnum(qc, "bits"));
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(qc, "group_size")))
            fprintf(f, " group %.0f", cli_jnum(qc, "group_size"));
        const cJSON *bpp = cJSON_GetObjectItemCaseSensitive(ql, "bits_per_param");
        if (cJSON_IsNumber(bpp))
            fprintf(f, "; %.0f linears at %.3f bits/param", cli_jnum(ql, "count"),
                    bpp->valuedouble);
        fprintf(f, "\n");
    } else {
        fprintf(f, "quantized   no\n");
    }
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(r, "memory");
    const cJSON *w   = cJSON_GetObjectItemCaseSensitive(mem, "weights");
    const cJSON *kv  = cJSON_GetObjectItemCaseSensitive(mem, "kv_cache");
    cli_fmt_bytes(cli_jnum(w, "fp32"), b1, sizeof b1);
    cli_fmt_bytes(cli_jnum(w, "fp16"), b2, sizeof b2);
    cli_fmt_bytes(cli_jnum(w, "int8"), b3, sizeof b3);
    cli_fmt_bytes(cli_jnum(w, "int4"), b4, sizeof b4);
    double g = cli_jnum(w, "int4_group_size");
    char   gs[32];
    if (g > 0)
        snprintf(gs, sizeof gs, "g%.0f", g);
    else
        snprintf(gs, sizeof gs, "per-channel");
    fprintf(f, "weights     fp32 %s | fp16 %s | int8 %s | int4 %s %s\n", b1, b2, b3, gs, b4);
    cli_fmt_bytes(cli_jnum(kv, "bytes"), b1, sizeof b1);
    fprintf(f, "KV cache    %s (%s, ctx %.0f x batch %.0f)\n", b1, cli_jstr(kv, "dtype"),
            cli_jnum(kv, "ctx"), cli_jnum(kv, "batch"));
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(r, "tensors");
    if (!list_tensors) {
        fprintf(f, "tensors     %d (--tensors lists them)\n", cJSON_GetArraySize(ts));
        return;
    }
    fprintf(f, "tensors     %d:\n", cJSON_GetArraySize(ts));
    for (const cJSON *t = ts ? ts->child : NULL; t; t = t->next) {
        char         shape[160] = "[";
        size_t       n          = 1;
        const cJSON *sh         = cJSON_GetObjectItemCaseSensitive(t, "shape");
        for (const cJSON *d = sh ? sh->child : NULL; d && n < sizeof shape - 24; d = d->next)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%.0f", d == sh->child ? "" : ", ",
                                  d->valuedouble);
        snprintf(shape + n, sizeof shape - n, "]");
        cli_fmt_bytes(cli_jnum(t, "bytes"), b1, sizeof b1);
        fprintf(f, "  %-52s %-5s %-16s %s\n", cli_jstr(t, "name"), cli_jstr(t, "dtype"), shape, b1);
    }
}

int cmd_inspect(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    char     *report = NULL;
    lq_err    err    = {0};
    lq_status s      = lq_inspect(a->pos[0], a->params, &report, &err);
    if (s != LQ_OK)
        return cli_fail(c, s, &err);
    if (c->json)
        printf("%s\n", report);
    /* The summary is this command's result: --quiet drops it only when --json already gave it. */
    if (!(c->json && c->quiet)) {
        cJSON *r = cJSON_Parse(report);
        if (!r) {
            lq_free(report);
            return cli_error(c, LQ_ERR_INTERNAL, "inspect: the library report is not JSON");
        }
        human(c->human, r, a->flag_val[0] != NULL);
        cJSON_Delete(r);
    }
    lq_free(report);
    return 0;
}
