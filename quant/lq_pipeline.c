/* lq_quantize: the layer-by-layer conversion driver.
 *
 *   validate -> open model (mmap) -> tokenizer + calibration windows -> embeddings
 *   for each decoder layer: load (dense fp32) -> [FP forward for the next layer] -> method
 *     -> [forward through the quantized layer] -> write its tensors -> free it
 *   -> embeddings/norm/lm_head, config.json (+ quantize_config.json), tokenizer files
 *   -> optional perplexity check -> report -> rename the temporary directory into place.
 *
 * Memory: one layer's weights, the calibration activations entering the current layer (twice
 * when the method propagates FP outputs), and the method's statistics. Output tensors stream to
 * disk as each layer finishes. */
#define _XOPEN_SOURCE 700 /* realpath */

#include "lq_acts.h"
#include "lq_calib_cache.h"
#include "lq_dataset.h"
#include "lq_gguf_job.h"
#include "lq_gpu.h"
#include "lq_json.h"
#include "lq_methods.h"
#include "lq_mixed.h"
#include "lq_outdir.h"
#include "lq_opts.h"
#include "lq_ops.h"
#include "lq_pipeline.h"
#include "lq_ppl.h"
#include "lq_tok.h"

#include <dirent.h>
#include <omp.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------------------------
 * Argument validation (order observed by the CLI tests: method, model dir, config.json,
 * options, output)
 * ------------------------------------------------------------------------------------------ */

static int kind_present(const lq_model_config *c, int kind) {
    return lq_slot_present(c, lq_kind_slot(c, kind));
}

/* Which linears the method's format can store at these settings, from config.json shapes alone
 * (every layer has the same ones), before any work: a bit width the format cannot store and a
 * run that would quantize nothing are errors naming the reason (and, when the group size is
 * what stands in the way, a group size that would work); why[l] says why a linear stays
 * unquantized. */
/* --format: "" (the method's own checkpoint), "gguf:TYPE" (one GGUF file, lq_gguf_job) or
 * "compressed-tensors" (the method's result in llm-compressor's layout, lq_qfmt_ct.c) */
static int fmt_gguf(const lq_opts *o) {
    return !strncmp(o->format, "gguf:", 5);
}
static int fmt_ct(const lq_opts *o) {
    return !strcmp(o->format, "compressed-tensors");
}

static lq_status plan_linears(const lq_method_traits *mt, const lq_opts *o,
                              const lq_model_config *cfg, const char *model,
                              int plan[LQ_SLOT_KINDS], char why[LQ_SLOT_KINDS][192], lq_err *err) {
    const lq_qformat *ft = lq_qformat_get(mt->format);
    lq_qconfig        qc;
    lq_qconfig_default(mt->format, &qc);
    mt->fill_qconfig(o, &qc);
    /* the bits the user asked for, not what the format's defaults made of them */
    const int bits = lq_param_applies(lq_param_find("bits"), mt->name) ? (int)o->bits : qc.bits;
    if (ft->bits && !(ft->bits >> bits & 1)) {
        char list[64] = "";
        int  left     = 0;
        for (int b = 1; b <= 16; b++)
            left += ft->bits >> b & 1;
        for (int b = 1; b <= 16; b++)
            if (ft->bits >> b & 1)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d",
                         !list[0]      ? ""
                         : --left == 1 ? " or "
                                       : ", ",
                         b);
        lq_qconfig_free(&qc);
        LQ_FAIL(err, LQ_ERR_BITS_UNSUPPORTED,
                "%s --bits %d: the %s checkpoint format stores %s-bit codes only%s", mt->name, bits,
                ft->name, list, mt->bits_hint ? mt->bits_hint : "");
    }
    int nfit = 0, nlin = 0;
    for (int l = 0; l < LQ_SLOT_KINDS; l++) {
        int64_t n, k;
        why[l][0] = 0;
        plan[l]   = 0;
        if (!kind_present(cfg, l))
            continue;
        lq_slot_shape(cfg, lq_kind_slot(cfg, l), &n, &k);
        /* --format gguf: each tensor's GGUF type (and its fallback) decides */
        plan[l] = fmt_gguf(o) || ft->fits(&qc, n, k, why[l], sizeof why[l]);
        nfit += plan[l];
        nlin++;
    }
    if (nfit > 0) {
        lq_qconfig_free(&qc);
        return LQ_OK;
    }
    /* nothing fits: say why for each shape, and try other group sizes */
    char msg[400] = "";
    for (int l = 0; l < LQ_SLOT_KINDS && strlen(msg) < 200; l++) {
        int64_t n, k;
        char    nm[128];
        if (!kind_present(cfg, l) || strstr(msg, why[l]))
            continue;
        lq_slot_shape(cfg, lq_kind_slot(cfg, l), &n, &k);
        lq_kind_name(cfg, l, nm, sizeof nm);
        snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s%s [%lld x %lld]: %s",
                 msg[0] ? "; " : "", nm, (long long)n, (long long)k, why[l]);
    }
    int64_t best_g = 0;
    int     best_n = 0;
    for (int64_t g = 256; g >= 16 && o->set.group_size + 1; g /= 2) {
        lq_qconfig q2 = qc;
        q2.group_size = g;
        int c         = 0;
        for (int l = 0; l < LQ_SLOT_KINDS; l++) {
            int64_t n, k;
            lq_slot_shape(cfg, lq_kind_slot(cfg, l), &n, &k);
            c += kind_present(cfg, l) && ft->fits(&q2, n, k, NULL, 0);
        }
        if (c > best_n)
            best_n = c, best_g = g;
    }
    char hint[128] = "";
    if (best_n > 0 && lq_param_applies(lq_param_find("group_size"), mt->name))
        snprintf(hint, sizeof hint,
                 " (--group-size %lld would quantize %d of the %d linears of "
                 "each layer)",
                 (long long)best_g, best_n, nlin);
    lq_qconfig_free(&qc);
    LQ_FAIL(err, LQ_ERR_NOTHING_TO_QUANTIZE,
            "%s: %s would quantize none of the model's linears at these settings: %s%s", model,
            mt->name, msg, hint);
}

/* The default group size (128) when it does not divide some linear's in_features but a smaller
 * one (64, 32) divides them all: GPTQ checkpoints with a ragged last group do not load in vLLM
 * and AutoAWQ cannot store them at all, so `llmquant awq model/ -o out/` on, say, a 576-wide
 * model quantizes every linear at 64 instead of a few at 128. An explicit --group-size is kept
 * as given. Returns the group size to use (0: keep the default). */
static int64_t auto_group_size(const lq_method_traits *mt, const lq_opts *o,
                               const lq_model_config *cfg) {
    const lq_param_info *gs = lq_param_find("group_size");
    if (!lq_param_applies(gs, mt->name) || o->set.group_size)
        return 0;
    const int64_t def = o->group_size;
    for (int64_t g = def; g >= 32; g /= 2) {
        int all = 1;
        for (int l = 0; l < LQ_SLOT_KINDS; l++) {
            int64_t n, k;
            lq_slot_shape(cfg, lq_kind_slot(cfg, l), &n, &k);
            all &= !kind_present(cfg, l) || k % g == 0;
        }
        if (all)
            return g == def ? 0 : g;
    }
    return 0;
}

/* --bpw-bits "3,4g64,4,8" -> distinct (width, group size) choices the format stores, ascending
 * in the bits they cost (on a 4096 x 4096 linear); a bare width takes --group-size
 * (o->group_size, set by the caller). */
static lq_status parse_choices(const lq_opts *o, lq_mixed_opts *mo, lq_err *err) {
    const char *s  = o->bpw_bits;
    mo->n_choices  = 0;
    const char *ok = "a comma-separated list of widths from 2, 3, 4, 8, each with an optional "
                     "group size (4g64)";
    for (const char *c = s; c && *c;) {
        char *end;
        long  b = strtol(c, &end, 10), g = 0;
        if (end != c && *end == 'g') {
            const char *g0 = end + 1;
            g              = strtol(g0, &end, 10);
            if (end == g0 || g < 1 || g > 1 << 20)
                LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--bpw-bits \"%s\": %s", s, ok);
        }
        if (end == c || (*end && *end != ',') || !(b == 2 || b == 3 || b == 4 || b == 8))
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--bpw-bits \"%s\": %s", s, ok);
        const int64_t gg  = g ? g : mo->group_size;
        int           dup = 0;
        for (int i = 0; i < mo->n_choices; i++)
            dup |= mo->choices[i] == b && lq_mixed_choice_group(mo, i) == gg;
        if (!dup) {
            LQ_RETURN_IF(mo->n_choices == LQ_MIXED_MAX_CHOICES, err, LQ_ERR_INVALID_ARG,
                         "--bpw-bits \"%s\": at most %d choices", s, LQ_MIXED_MAX_CHOICES);
            mo->choices[mo->n_choices]        = (int)b;
            mo->choice_group[mo->n_choices++] = g;
        }
        c = *end ? end + 1 : end;
    }
    for (int i = 1; i < mo->n_choices; i++) /* insertion sort by cost */
        for (int j = i; j > 0; j--) {
            const int64_t a = lq_mixed_linear_bits(4096, 4096, mo->choices[j - 1],
                                                   lq_mixed_choice_group(mo, j - 1));
            const int64_t b =
                lq_mixed_linear_bits(4096, 4096, mo->choices[j], lq_mixed_choice_group(mo, j));
            if (a <= b)
                break;
            const int     tb = mo->choices[j];
            const int64_t tg = mo->choice_group[j];
            mo->choices[j] = mo->choices[j - 1], mo->choice_group[j] = mo->choice_group[j - 1];
            mo->choices[j - 1] = tb, mo->choice_group[j - 1] = tg;
        }
    if (mo->n_choices < 2)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--bpw-bits \"%s\": give at least two choices", s);
    return LQ_OK;
}

/* --target-bpw: the options it needs, and a budget the narrowest width can meet. */
static lq_status check_target(const lq_opts *o, const lq_model_config *cfg, const int *plan,
                              const char *model, lq_err *err) {
    if (!o->set.target_bpw)
        return LQ_OK;
    if (o->set.bits)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                "--bits and --target-bpw exclude each other (--bpw-bits lists the widths)");
    if (lq_moe_count(cfg) > 0)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: --target-bpw does not handle mixture-of-experts models yet (%s): use --bits",
                model, cfg->model_type);
    lq_mixed_opts mo;
    memset(&mo, 0, sizeof mo);
    mo.group_size = o->group_size;
    LQ_TRY(parse_choices(o, &mo, err));
    for (int c = 0; c < mo.n_choices; c++) /* an explicit group must divide every k */
        for (int l = 0; l < LQ_LIN_COUNT && mo.choice_group[c]; l++) {
            int64_t n, k;
            if (!plan[l] || !lq_lin_present(cfg, (lq_lin_id)l))
                continue;
            lq_lin_shape(cfg, (lq_lin_id)l, &n, &k);
            if (k % mo.choice_group[c])
                LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                        "%s: --bpw-bits %dg%lld: group size %lld does not divide %s's %lld "
                        "input features",
                        model, mo.choices[c], (long long)mo.choice_group[c],
                        (long long)mo.choice_group[c], lq_lin_name((lq_lin_id)l), (long long)k);
        }
    const double  t  = o->target_bpw;
    const int64_t g  = lq_mixed_choice_group(&mo, 0);
    const double  lo = lq_mixed_uniform_bpw(cfg, plan, mo.choices[0], g);
    if (t < lo)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                "%s: --target-bpw %g is below %.4f, the bits per weight of the decoder linears "
                "with every one at %d bits (group size %lld)",
                model, t, lo, mo.choices[0], (long long)g);
    return LQ_OK;
}

/* What --format compressed-tensors takes: the integer results with contiguous groups. */
static lq_status check_ct(const char *method, lq_opts *o, lq_err *err) {
    const lq_method_traits *mt = lq_method_traits_get(lq_method_index(method));
    if (mt->format != LQ_FMT_GPTQ && mt->format != LQ_FMT_AWQ)
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "--format compressed-tensors: %s's result (%s) has no pack-quantized form "
                "(rtn, gptq and awq write it)",
                method, lq_qformat_get(mt->format)->desc);
    /* compressed-tensors keeps groups in column order (act-order "weight"): GPTQ's act-order
     * runs with static groups, as llm-compressor's does */
    if (o->desc_act)
        o->static_groups = 1;
    return LQ_OK;
}

static lq_status validate(const char *method, const char *model_dir, const char *out_dir,
                          const lq_params *p, lq_opts *o, char *note, size_t note_cap,
                          lq_err *err) {
    if (!method || !model_dir || !out_dir || !*model_dir || !*out_dir)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "lq_quantize: method, model_dir and out_dir are required");
    if (lq_method_index(method) < 0)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                "unknown method \"%s\" (methods: rtn, gptq, awq, nf4, int8)", method);
    lq_source *src = NULL;
    LQ_TRY(lq_source_open(model_dir, &src, err)); /* config.json and the tensor files parse */
    const lq_model_config cfg = *lq_source_model_config(src);
    lq_source_close(src);
    LQ_TRY(lq_params_check_applies(p, method, err));
    lq_opts_read(p, o);
    if (fmt_gguf(o)) /* the GGUF type decides every grid: plan every linear */
        o->group_size = -1;
    const lq_method_traits *mt = lq_method_traits_get(lq_method_index(method));
    const int64_t           g  = auto_group_size(mt, o, &cfg);
    if (g > 0) {
        o->group_size = g;
        snprintf(note, note_cap,
                 "group size %s does not divide every linear's in_features; using %lld, which "
                 "divides them all (pass --group-size to choose)",
                 lq_param_find("group_size")->def, (long long)g);
    }
    int  plan[LQ_SLOT_KINDS];
    char why[LQ_SLOT_KINDS][192];
    LQ_TRY(plan_linears(mt, o, &cfg, model_dir, plan, why, err));
    LQ_TRY(check_target(o, &cfg, plan, model_dir, err));
    if (lq_paths_overlap(model_dir, out_dir))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: output overlaps the model directory %s", out_dir,
                model_dir);
    if (fmt_ct(o))
        LQ_TRY(check_ct(method, o, err));
    return fmt_gguf(o) ? LQ_OK : lq_outdir_check(out_dir, o->force, err); /* gguf: the sink's */
}

/* ------------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------------ */
typedef struct run {
    const lq_method_traits *mt;
    lq_opts                 o; /* the job's options, defaults it chose included */
    const lq_callbacks     *cb;
    lq_err                 *err;
    lq_model               *m;
    lq_tokenizer           *tok;
    lq_windows              win;
    lq_qconfig              qcfg;
    lq_outdir               od;
    lq_st_writer           *wr;
    lq_dtype                odt; /* unquantized tensors */
    const char             *spill_dir;
    lq_ccache               cache;
    int64_t                 cache_hits;
    int                     nthreads_est;
    lq_acts                *cur, *nxt; /* activations entering / leaving the current layer */
    float                  *chunk;     /* one chunk of chunk_seqs sequences, on be */
    float                  *stage;     /* one chunk's saved stage state (resumed propagation) */
    size_t                  chunk_bytes, stage_bytes;
    int64_t                 chunk_seqs;
    int64_t                 spill_budget; /* per activation spill in host memory, -1 unlimited */
    int64_t                 dev_budget;   /* per activation store in device memory */
    int                     dev_budget_set;
    /* where the calibration forwards run: be_host (the cpu backend), or be_dev on the device
     * --device picked; the forward workspace on it */
    lq_be                   be_host, be_dev, *be;
    lq_fwd_ws              *ws;
    double                  t0, t_calib, t_layers, t_mixed0;
    double                  phase[LQ_PH_COUNT]; /* seconds (lq_methods.h LQ_PH_*) */
    const char             *calib_source; /* file or LQ_CALIB_BUILTIN */
    int64_t                 n_quant, n_dense;
    int                     plan[LQ_SLOT_KINDS];
    char                    why[LQ_SLOT_KINDS][192];
    char                    skipped[LQ_SLOT_KINDS][64];
    int                     n_skipped;
    double                  loss_sum[LQ_SLOT_KINDS];
    /* mixture of experts: [layer, expert] tokens routed to each by the calibration set (-1:
     * no pass routed them) and whether its statistics fell back to every token */
    int64_t        *moe_tokens;
    uint8_t        *moe_fallback;
    cJSON          *check;    /* ppl check results */
    int8_t         *lin_bits; /* --target-bpw: [layer * LQ_LIN_COUNT + lin], 0: --bits */
    int64_t        *lin_group; /* and the group sizes, 0: --group-size */
    int64_t         nslots;   /* per layer (lq_slot_count), and the job's arrays: */
    lq_qbuf        *slot_out;
    int            *slot_quantized;
    double         *slot_loss;
    /* --format gguf: the file the layers go to, each slot's GGML type in it (lq_dtype, <= 0:
     * not the method's) and the blocks the method made */
    lq_gguf_sink   *sink;
    int            *slot_ggml;
    uint8_t       **slot_blocks;
    uint8_t        *moe_mode; /* [experts] */
    lq_mixed_result mixed;
    lq_gpu         *gpu; /* NULL: everything on the CPU */
} run;

static int progress(run *r, const char *phase, int64_t step, int64_t total, double t_start,
                    const char *detail) {
    if (!r->cb || !r->cb->progress)
        return 0;
    double      el  = lq_now() - t_start;
    double      eta = step > 0 && total > 0 ? el / (double)step * (double)(total - step) : -1;
    lq_progress p   = {phase, step, total, el, eta, detail};
    return r->cb->progress(&p, r->cb->user);
}

static void warn(void *user, const char *msg) {
    run *r = user;
    if (r->cb && r->cb->log)
        r->cb->log(LQ_LOG_WARN, msg, r->cb->user);
}

static lq_status encode_cb(void *user, const char *text, int64_t len, int32_t **ids, int64_t *n_ids,
                           lq_err *err) {
    const lq_tokenizer *t = user;
    return lq_tok_encode(t, text, len, lq_tok_adds_bos(t), ids, n_ids, err);
}

static lq_status write_vec(run *r, const char *name, const float *v, int64_t n) {
    return lq_st_writer_add_f32(r->wr, name, r->odt, 1, &n, v, r->err);
}

static lq_status write_dense(run *r, const char *prefix, const lq_linear *l) {
    char    name[512];
    int64_t shape[2] = {l->buf.q.n, l->buf.q.k};
    snprintf(name, sizeof name, "%s.weight", prefix);
    LQ_TRY(lq_st_writer_add_f32(r->wr, name, r->odt, 2, shape, l->buf.q.dense, r->err));
    if (l->bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        LQ_TRY(write_vec(r, name, l->bias, l->buf.q.n));
    }
    return LQ_OK;
}

/* A linear left unquantized: recorded once (quantization_config lists it); the planned ones
 * were announced up front, any other is the method's own decision and gets a warning here. */
static void note_skipped(run *r, int64_t layer, int l, const lq_qlinear *w) {
    char nm[128];
    lq_kind_name(&r->m->cfg, l, nm, sizeof nm);
    for (int i = 0; i < r->n_skipped; i++)
        if (!strcmp(r->skipped[i], nm))
            return;
    snprintf(r->skipped[r->n_skipped++], sizeof r->skipped[0], "%s", nm);
    if (!r->plan[l])
        return;
    if (!r->why[l][0])
        snprintf(r->why[l], sizeof r->why[l], "left unquantized by %s", r->mt->name);
    char msg[320];
    snprintf(msg, sizeof msg, "model.layers.%lld.%s [%lld x %lld]: %s; kept in %s",
             (long long)layer, nm, (long long)w->n, (long long)w->k, r->why[l],
             r->qcfg.torch_dtype);
    warn(r, msg);
}

/* The router and the shared expert's gate: in float, never a method's (lq_model.h, slots). */
static lq_status write_moe_float(run *r, int64_t layer, lq_layer *L) {
    const lq_model_config *c = &r->m->cfg;
    for (int64_t j = 0; j < lq_moe_count(c); j++) {
        char       leaf[128], prefix[256];
        int64_t    n, k;
        lq_linear *l;
        if (!lq_moe_is_float(c, j))
            continue;
        lq_moe_lin(c, L, j, leaf, sizeof leaf, &n, &k, &l);
        snprintf(prefix, sizeof prefix, "model.layers.%lld.%s", (long long)layer, leaf);
        LQ_TRY(write_dense(r, prefix, l));
    }
    return LQ_OK;
}

/* The FP outputs of a layer are the same for every job on the same calibration set: the batch
 * cache (when configured) keeps them under the next layer's index, on a host backend (whose
 * activations are the spills the cache reads and fills). */
static int fp_cacheable(const run *r) {
    return r->cache.enabled && !r->be->ops->device && lq_acts_count(r->cur) <= 4096;
}

static int fp_cached(run *r, int64_t layer) {
    int64_t d = r->m->cfg.hidden_size, nc = lq_acts_count(r->cur), tot = 0;
    if (!fp_cacheable(r))
        return 0;
    for (int64_t c = 0; c < nc; c++)
        tot += lq_acts_numel(r->cur, c);
    return lq_ccache_has_acts(&r->cache, layer + 1, nc, tot, d);
}

static lq_status load_fp(run *r, int64_t layer) {
    int64_t nc = lq_acts_count(r->cur), cn[4096];
    for (int64_t c = 0; c < nc; c++)
        cn[c] = lq_acts_numel(r->cur, c);
    r->cache_hits++;
    return lq_ccache_load_acts(&r->cache, layer + 1, lq_acts_spill(r->nxt), r->chunk, nc, cn,
                               r->m->cfg.hidden_size, r->err);
}

static void store_fp(run *r, int64_t layer) {
    if (fp_cacheable(r))
        lq_ccache_store_acts(&r->cache, layer + 1, lq_acts_spill(r->nxt), r->chunk,
                             r->m->cfg.hidden_size);
}

/* cur -> layer -> nxt, chunk by chunk, on the backend. */
static lq_status propagate(run *r, lq_qjob *j, lq_acts *resume, lq_acts *act) {
    int64_t d = r->m->cfg.hidden_size, nc = lq_acts_count(r->cur);
    int64_t ff = r->m->cfg.intermediate_size;
    /* from the residual after attention when the method saved it for the quantized layer:
     * the layer's output from there, without its attention again; with the MLP's activation
     * too, down_proj alone */
    if ((resume && lq_acts_count(resume) != nc) || (act && (!resume || lq_acts_count(act) != nc)))
        LQ_FAIL(r->err, LQ_ERR_INTERNAL,
                "propagation: saved stages have %lld / %lld of %lld chunks",
                (long long)(resume ? lq_acts_count(resume) : -1),
                (long long)(act ? lq_acts_count(act) : -1), (long long)nc);
    const size_t gb = act ? (size_t)(r->chunk_seqs * r->win.seqlen * ff) * sizeof(float) : 0;
    float       *g  = NULL;
    if (act && r->be->ops->alloc(r->be, (void **)&g, gb) != LQ_OK)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory for a chunk's MLP activation (%s)",
                lq_be_error(r->be));
    lq_fwd_resume rs = {act ? LQ_STAGE_ACT : LQ_STAGE_RESID,
                        act ? g : r->stage,
                        LQ_STAGE_INPUT,
                        NULL,
                        NULL,
                        act ? r->stage : NULL};
    const lq_layer *Lx = NULL; /* the job's layer, as the method left it, on the backend */
    const double    t0 = lq_now();
    lq_status       st = lq_qjob_layer(j, &Lx);
    for (int64_t c = 0; c < nc && st == LQ_OK; c++) {
        int64_t n  = lq_acts_numel(r->cur, c);
        int64_t ns = n / (r->win.seqlen * d);
        if (resume) {
            if (lq_acts_numel(resume, c) != n ||
                (act && (lq_acts_numel(act, c) != ns * r->win.seqlen * ff || ns > r->chunk_seqs))) {
                st = lq_fail(r->err, LQ_ERR_INTERNAL, "propagation: saved stage chunk %lld size",
                             (long long)c);
                break;
            }
            st = lq_acts_read(resume, c, r->stage, r->err);
            if (st == LQ_OK && act)
                st = lq_acts_read(act, c, g, r->err);
        } else {
            st = lq_acts_read(r->cur, c, r->chunk, r->err);
        }
        if (st == LQ_OK)
            st = lq_layer_forward_ex(r->m, Lx, r->chunk, ns, r->win.seqlen, NULL, NULL, -1,
                                     resume ? &rs : NULL, r->ws, r->err);
        if (st == LQ_OK)
            st = lq_acts_append(r->nxt, r->chunk, n, r->err);
    }
    if (st == LQ_OK && r->be->ops->sync(r->be) != LQ_OK)
        st = lq_fail(r->err, LQ_ERR_CUDA, "propagation: %s", lq_be_error(r->be));
    r->phase[LQ_PH_FORWARD] += lq_now() - t0;
    if (g)
        r->be->ops->release(r->be, g, gb);
    return st;
}

/* Overlap the next layer's disk reads with this one. */
static void prefetch_layer(const run *r, int64_t i) {
    char pre[64];
    int  pl = snprintf(pre, sizeof pre, "model.layers.%lld.", (long long)i);
    for (int64_t t = 0; t < lq_st_count(r->m->st); t++) {
        const lq_st_tensor *tt = lq_st_get(r->m->st, t);
        if (!strncmp(tt->name, pre, (size_t)pl))
            lq_st_prefetch(r->m->st, tt);
    }
}

/* The job of layer i: its slots' result arrays cleared, its experts' modes, its widths. */
static void job_init(run *r, int64_t i, lq_layer *L, lq_qjob *j) {
    const lq_model_config *c = &r->m->cfg;
    memset(j, 0, sizeof *j);
    memcpy(j->plan, r->plan, sizeof j->plan);
    j->nslots    = r->nslots;
    j->out       = r->slot_out;
    j->quantized = r->slot_quantized;
    j->loss      = r->slot_loss;
    memset(j->out, 0, (size_t)r->nslots * sizeof *j->out);
    memset(j->quantized, 0, (size_t)r->nslots * sizeof *j->quantized);
    memset(j->loss, 0, (size_t)r->nslots * sizeof *j->loss);
    if (c->num_experts) {
        j->moe_mode       = r->moe_mode;
        j->moe_tokens     = r->moe_tokens + i * c->num_experts;
        j->moe_fallback   = r->moe_fallback + i * c->num_experts;
        j->moe_all        = !strcmp(r->o.moe_calib, "all");
        j->moe_min_tokens = r->o.moe_min_tokens;
        memset(j->moe_mode, j->moe_all ? LQ_MOE_ALL : LQ_MOE_ROUTED, (size_t)c->num_experts);
        if (j->moe_all)
            memset(j->moe_fallback, 1, (size_t)c->num_experts);
    }
    for (int l = 0; r->lin_bits && l < LQ_LIN_COUNT; l++) {
        j->bits[l]  = r->lin_bits[i * LQ_LIN_COUNT + l];
        j->group[l] = r->lin_group[i * LQ_LIN_COUNT + l];
    }
    j->model        = r->m;
    j->o            = &r->o;
    j->layer        = i;
    j->L            = L;
    j->acts         = r->cur;
    j->chunk        = r->chunk;
    j->nseq         = r->win.nsamples;
    j->seqlen       = r->win.seqlen;
    j->chunk_seqs   = r->chunk_seqs;
    j->be           = r->be;
    j->ws           = r->ws;
    j->gpu          = r->gpu;
    j->qcfg         = &r->qcfg;
    j->warn         = warn;
    j->warn_user    = r;
    j->err          = r->err;
    j->stage_budget = r->spill_budget;
    j->stage_dev_budget = r->dev_budget;
    j->phase            = r->phase;
    j->spill_dir    = r->spill_dir;
    if (r->sink) {
        j->ggml        = r->slot_ggml;
        j->ggml_blocks = r->slot_blocks;
        for (int64_t l = 0; l < r->nslots; l++) {
            char name[300];
            lq_qjob_module(j, l, name, sizeof name - 8);
            strcat(name, ".weight");
            r->slot_ggml[l] = lq_slot_present(c, l) ? (int)lq_gguf_sink_type(r->sink, name) : 0;
        }
    }
}

/* --format gguf: the blocks of the linears the method rounded go to the file, then the layer's
 * tensors in llama.cpp's order (the rest rounded from the input as llama-quantize does). */
static lq_status write_layer_gguf(run *r, int64_t i, lq_layer *L, lq_qjob *j) {
    const lq_model_config *c = &r->m->cfg;
    if (r->mt->folds_scales) { /* the norms the scales went into come from the layer */
        lq_layer_vec vecs[LQ_LAYER_MAX_VECS];
        const int    nvec = lq_layer_vecs(c, L, vecs);
        for (int v = 0; v < nvec; v++) {
            char name[300];
            if (vecs[v].slot != &L->attn_norm && vecs[v].slot != &L->mlp_norm)
                continue;
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, vecs[v].leaf);
            LQ_TRY(lq_gguf_sink_put_f32(r->sink, name, *vecs[v].slot, vecs[v].len, r->err));
        }
    }
    for (int64_t l = 0; l < r->nslots; l++) {
        if (!lq_slot_present(c, l))
            continue;
        char name[300];
        lq_qjob_module(j, l, name, sizeof name - 8);
        strcat(name, ".weight");
        if (r->slot_blocks[l]) {
            uint8_t *b        = r->slot_blocks[l];
            r->slot_blocks[l] = NULL;
            LQ_TRY(lq_gguf_sink_put(r->sink, name, b, r->err));
            r->n_quant++;
            r->loss_sum[lq_slot_kind(c, l)] += j->loss[l];
        } else if (!lq_gguf_sink_has(r->sink, name)) { /* the names must meet: never silently */
            LQ_FAIL(r->err, LQ_ERR_INTERNAL, "%s: no tensor of the GGUF file", name);
        } else {
            const lq_qlinear *q = &lq_layer_slot(L, l)->buf.q;
            note_skipped(r, i, lq_slot_kind(c, l), q);
            r->n_dense++;
            if (r->mt->folds_scales) /* a float tensor the scales may have reached */
                LQ_TRY(lq_gguf_sink_put_f32(r->sink, name, q->dense, q->n * q->k, r->err));
        }
        const lq_linear *lin = lq_layer_slot(L, l);
        if (r->mt->folds_scales && lin->bias) { /* v_proj's bias takes o_proj's scales */
            lq_qjob_module(j, l, name, sizeof name - 8);
            strcat(name, ".bias");
            LQ_TRY(lq_gguf_sink_put_f32(r->sink, name, lin->bias, lin->buf.q.n, r->err));
        }
    }
    return lq_gguf_sink_write_layer(r->sink, i, r->err);
}

/* Layer i's tensors: its vectors, then each linear as the method left it (quantized, or
 * float with the reason noted), each freed once written. */
static lq_status write_layer(run *r, int64_t i, lq_layer *L, lq_qjob *j) {
    const lq_model_config *c = &r->m->cfg;
    char                   name[512];
    if (r->sink)
        return write_layer_gguf(r, i, L, j);
    lq_layer_vec           vecs[LQ_LAYER_MAX_VECS];
    const int              nvec = lq_layer_vecs(c, L, vecs);
    for (int v = 0; v < nvec; v++) {
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, vecs[v].leaf);
        LQ_TRY(write_vec(r, name, *vecs[v].slot, vecs[v].len));
    }
    for (int64_t l = 0; l < r->nslots; l++) {
        char       prefix[256];
        const int  kind = lq_slot_kind(c, l);
        lq_linear *lin  = lq_layer_slot(L, l);
        if (!lq_slot_present(c, l))
            continue;
        lq_qjob_module(j, l, prefix, sizeof prefix);
        if (j->quantized[l]) {
            LQ_TRY(lq_qlinear_write(r->wr, prefix, &j->out[l].q, &r->qcfg, r->err));
            r->n_quant++;
            r->loss_sum[kind] += j->loss[l];
        } else {
            note_skipped(r, i, kind, &lin->buf.q);
            LQ_TRY(write_dense(r, prefix, lin));
            r->n_dense++;
        }
        lq_qbuf_free(&j->out[l]); /* written: memory back before the next linear */
    }
    return write_moe_float(r, i, L);
}

static lq_status do_layers(run *r) {
    const lq_model_config *c  = &r->m->cfg;
    lq_status              st = LQ_OK;
    double                 t0 = lq_now();
    for (int64_t i = 0; i < c->num_layers; i++) {
        char detail[64];
        snprintf(detail, sizeof detail, "model.layers.%lld", (long long)i);
        if (progress(r, "layer", i, c->num_layers, t0, detail))
            LQ_FAIL(r->err, LQ_ERR_INTERRUPTED, "interrupted at layer %lld", (long long)i);
        lq_layer     L;
        const double tr = lq_now();
        LQ_TRY(lq_model_load_layer(r->m, i, &L, r->err));
        r->phase[LQ_PH_READ] += lq_now() - tr;
        if (i + 1 < c->num_layers)
            prefetch_layer(r, i + 1);
        lq_qjob j;
        job_init(r, i, &L, &j);
        /* Next layer's inputs: from the FP layer (AWQ, int8: the batch cache, the method's
         * first capture pass, or a forward before the method) or from the quantized one after
         * it (GPTQ). */
        const int fp = r->cur && !r->mt->propagate_quantized, hit = fp && fp_cached(r, i);
        if (hit)
            LQ_TRY_GOTO(load_fp(r, i));
        else if (fp && r->mt->fp_first_capture)
            j.fp_out = r->nxt;
        else if (fp)
            LQ_TRY_GOTO(propagate(r, &j, NULL, NULL));
        /* the method's time less its passes and packing is its own arithmetic */
        const double tq = lq_now(), fq = r->phase[LQ_PH_FORWARD], pq = r->phase[LQ_PH_PACK];
        LQ_TRY_GOTO(r->mt->quantize_layer(&j));
        r->phase[LQ_PH_SOLVE] += lq_now() - tq - (r->phase[LQ_PH_FORWARD] - fq) -
                                 (r->phase[LQ_PH_PACK] - pq);
        if (j.fp_out)
            LQ_FAIL_GOTO(r->err, LQ_ERR_INTERNAL, "%s did not capture the layer's input first",
                         r->mt->name);
        if (fp && !hit)
            store_fp(r, i);
        if (r->cur && r->mt->propagate_quantized)
            LQ_TRY_GOTO(propagate(r, &j, j.resume, j.resume_act));
        lq_acts_free(j.resume); /* before the output is written: memory back */
        lq_acts_free(j.resume_act);
        j.resume = j.resume_act = NULL;
        if (r->cur) {
            lq_acts *t = r->cur;
            r->cur     = r->nxt;
            r->nxt     = t;
            LQ_TRY_GOTO(lq_acts_clear(r->nxt, r->err));
        }
        const double tw = lq_now();
        LQ_TRY_GOTO(write_layer(r, i, &L, &j));
        r->phase[LQ_PH_WRITE] += lq_now() - tw;
    done:
        for (int64_t l = 0; l < r->nslots; l++) {
            lq_qbuf_free(&j.out[l]);
            if (r->slot_blocks) {
                free(r->slot_blocks[l]);
                r->slot_blocks[l] = NULL;
            }
        }
        lq_acts_free(j.resume);
        lq_acts_free(j.resume_act);
        lq_qjob_release(&j);
        lq_layer_free(&L);
        if (st != LQ_OK)
            return lq_err_prefix(r->err, "layer %lld", (long long)i);
    }
    progress(r, "layer", c->num_layers, c->num_layers, t0, "done");
    return LQ_OK;
}

/* Files that travel with a checkpoint (tokenizer, generation defaults): copied from the model
 * directory, or rebuilt from a GGUF file's metadata. */
static lq_status copy_side_files(run *r) {
    char dst[4200];
    LQ_TRY(lq_outdir_write_side_files(&r->od, r->m->src, r->err));
    /* An explicit --tokenizer travels under the name lq_tok_load_dir looks for. */
    if (r->tok && r->o.set.tokenizer) {
        const char *tp   = lq_tok_source_path(r->tok);
        lq_tok_kind kind = lq_tok_get_kind(r->tok);
        const char *as   = kind == LQ_TOK_HF_JSON ? "tokenizer.json"
                           : kind == LQ_TOK_SPM   ? "tokenizer.model"
                                                  : "tokenizer.bin";
        LQ_TRY(lq_outdir_path(&r->od, as, dst, sizeof dst, r->err));
        if (!lq_file_exists(dst))
            LQ_TRY(lq_copy_file(tp, dst, r->err));
    }
    return LQ_OK;
}

static lq_status write_config(run *r) {
    char        dst[4200];
    int64_t     len;
    const char *text = lq_source_config(r->m->src, &len);
    cJSON      *root = NULL;
    LQ_TRY(lq_json_parse(text, (size_t)len, lq_source_config_label(r->m->src), &root, r->err));
    lq_status              st = LQ_OK;
    const lq_model_config *c  = &r->m->cfg;
    /* What stays in float, as the format's config says it (AWQ modules_to_not_convert, bnb
     * llm_int8_skip_modules, GPTQ modules_in_block_to_quantize): the skipped kinds, and the
     * router and the shared expert's gate (AutoAWQ: Mixtral's "gate"). */
    if (r->n_skipped > 0 || c->num_experts) {
        r->qcfg.has_skip = 1;
        for (int i = 0; i < r->n_skipped && r->qcfg.n_skip < LQ_QCFG_MAX_SKIP; i++) {
            /* a copy, not snprintf: both live in *r, and GCC from -O1 flags that as overlap */
            char        *d = r->qcfg.skip[r->qcfg.n_skip++];
            const size_t n = strnlen(r->skipped[i], sizeof r->skipped[0] - 1);
            _Static_assert(sizeof r->qcfg.skip[0] >= sizeof r->skipped[0], "skip names fit");
            memcpy(d, r->skipped[i], n);
            d[n] = '\0';
        }
        for (int64_t j = 0; j < lq_moe_count(c) && r->qcfg.n_skip < LQ_QCFG_MAX_SKIP; j++) {
            int64_t n, k;
            char    leaf[128];
            lq_moe_lin(c, NULL, j, leaf, sizeof leaf, &n, &k, NULL);
            if (lq_moe_is_float(c, j))
                snprintf(r->qcfg.skip[r->qcfg.n_skip++], sizeof r->qcfg.skip[0], "%s", leaf);
        }
    }
    for (int64_t l = 0; r->n_skipped > 0 && l < lq_slot_count(c); l++) {
        char nm[128], leaf[128];
        int  skip = !lq_slot_present(c, l);
        lq_kind_name(c, lq_slot_kind(c, l), nm, sizeof nm);
        for (int i = 0; i < r->n_skipped; i++)
            skip |= !strcmp(r->skipped[i], nm);
        lq_slot_name(c, l, leaf, sizeof leaf);
        if (!skip)
            LQ_TRY_GOTO(lq_qconfig_add_block_module(&r->qcfg, leaf, r->err));
    }
    cJSON_DeleteItemFromObject(root, "torch_dtype");
    cJSON_AddStringToObject(root, "torch_dtype", r->qcfg.torch_dtype);
    LQ_TRY_GOTO(lq_qconfig_apply(&r->qcfg, root, r->od.tmp_path, r->err));
    LQ_TRY_GOTO(lq_json_keep_float_spelling(root, text, (size_t)len, r->err));
    LQ_TRY_GOTO(lq_outdir_path(&r->od, "config.json", dst, sizeof dst, r->err));
    st = lq_json_write_file(root, dst, r->err);
done:
    cJSON_Delete(root);
    return st;
}

/* The job's per-slot arrays, and the experts' per-layer records. */
static lq_status alloc_slots(run *r) {
    const lq_model_config *c = &r->m->cfg;
    const int64_t          E = c->num_experts, nl = c->num_layers;
    r->nslots         = lq_slot_count(c);
    r->slot_out       = lq_calloc_n(r->nslots, sizeof *r->slot_out);
    r->slot_quantized = lq_calloc_n(r->nslots, sizeof *r->slot_quantized);
    r->slot_loss      = lq_calloc_n(r->nslots, sizeof *r->slot_loss);
    if (!r->slot_out || !r->slot_quantized || !r->slot_loss)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory");
    if (fmt_gguf(&r->o) && (!(r->slot_ggml = lq_calloc_n(r->nslots, sizeof *r->slot_ggml)) ||
                            !(r->slot_blocks = lq_calloc_n(r->nslots, sizeof *r->slot_blocks))))
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory");
    if (!E)
        return LQ_OK;
    r->moe_mode     = lq_calloc_n(E, 1);
    r->moe_tokens   = lq_malloc_n(nl * E, sizeof *r->moe_tokens);
    r->moe_fallback = lq_calloc_n(nl * E, 1);
    if (!r->moe_mode || !r->moe_tokens || !r->moe_fallback)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < nl * E; i++)
        r->moe_tokens[i] = -1;
    return LQ_OK;
}

/* --max-memory: everything but the calibration activations is estimated up front (what the
 * process holds now -- embeddings, mapped headers --, one layer's fp32 weights and their packed
 * copies, the method's working set, the forward workspace and chunk buffers); the activations
 * get what is left, split between the copy entering the layer and the one leaving it, and spill
 * to disk (zstd) beyond that. */
/* Bytes everything but the spilled activations needs with chunks of cs sequences. */
static int64_t fixed_bytes(const run *r, int64_t cs, int64_t T) {
    const lq_model_config *c = &r->m->cfg;
    int64_t d = c->hidden_size, I = c->intermediate_size, qd = c->num_heads * c->head_dim;
    int64_t tok = cs * r->win.seqlen;
    int64_t ws  = 4 * tok * (4 * d + 3 * qd + 2 * I) +
                 4 * (int64_t)r->nthreads_est * r->win.seqlen * r->win.seqlen;
    int64_t lw   = lq_layer_float_bytes(c);
    int64_t big  = d * (qd > I ? qd : I); /* widest linear: k/v are never wider than q (GQA) */
    int64_t work = r->mt->work_bytes ? r->mt->work_bytes(c, T) : 0;
    /* Beside the layer's fp32 copy: while it loads, the mapped checkpoint pages of the tensor
     * being converted (<= 4 bytes an element, released once read); later, and never at the same
     * time (the previous layer's outputs are freed before the next load), the packed output
     * (<= 1/4) and the method's working set. */
    int64_t phase = 4 * big > lw / 4 + work ? 4 * big : lw / 4 + work;
    /* stage states: a chunk read and one written by a pass, one read by the propagation */
    int64_t stage = r->mt->stage_copies > 0 ? 4 * tok * (2 * (qd > d ? qd : d) + d) : 0;
    return lq_cur_rss_bytes() + lw + phase + ws + 8 * tok * d + stage + (32ll << 20);
}

/* Chunk size: ~16k tokens (wide GEMMs), fewer sequences when a --max-memory budget would not
 * hold the forward scratch of such a chunk plus two chunks of activations. */
static int64_t plan_chunk(const run *r, int64_t T) {
    int64_t cs     = 16384 / r->win.seqlen;
    cs             = cs < 1 ? 1 : cs > r->win.nsamples ? r->win.nsamples : cs;
    int64_t maxmem = r->o.max_memory;
    int64_t d      = r->m->cfg.hidden_size;
    while (maxmem > 0 && cs > 1 && maxmem - fixed_bytes(r, cs, T) < 2 * 4 * cs * r->win.seqlen * d)
        cs = cs * 3 / 4 < cs - 1 ? cs * 3 / 4 : cs - 1;
    return cs;
}

static lq_status plan_memory(run *r, int64_t T, int64_t *budget) {
    int64_t maxmem = r->o.max_memory;
    *budget        = -1;
    if (maxmem <= 0)
        return LQ_OK;
    int64_t d = r->m->cfg.hidden_size, tok = r->chunk_seqs * r->win.seqlen;
    int64_t fixed = fixed_bytes(r, r->chunk_seqs, T);
    int64_t left  = maxmem - fixed;
    /* the layer's input and output, and the stage states the method keeps between passes */
    int64_t ncopies = 2 + r->mt->stage_copies;
    if (left / ncopies < 4 * tok * d)
        LQ_FAIL(r->err, LQ_ERR_NOMEM,
                "--max-memory %.0f MiB is below the %.0f MiB needed for one layer, its working "
                "set and %lld activation chunks",
                (double)maxmem / (1 << 20), (double)(fixed + 4 * ncopies * tok * d) / (1 << 20),
                (long long)ncopies);
    *budget = left / ncopies;
    return LQ_OK;
}

static lq_status calibrate(run *r) {
    double      t0   = lq_now();
    const char *path = r->o.calib;
    if (lq_calib_is_builtin(path))
        path = LQ_CALIB_BUILTIN;
    r->calib_source = path;
    int64_t seqlen  = r->o.set.seqlen ? r->o.seqlen : r->mt->default_seqlen;
    if (progress(r, "calibrate", 0, 1, t0, path))
        LQ_FAIL(r->err, LQ_ERR_INTERRUPTED, "interrupted");
    int64_t  nsam = r->o.nsamples;
    uint64_t seed = (uint64_t)r->o.seed;
    LQ_TRY(lq_ccache_open(&r->cache, r->o.cache_dir, r->m->dir, path, lq_tok_source_path(r->tok),
                          nsam, seqlen, seed, r->err));
    if (lq_ccache_load_windows(&r->cache, &r->win)) {
        r->cache_hits++;
    } else {
        const int64_t text_max = lq_calib_text_budget(nsam, seqlen, r->o.max_memory);
        LQ_TRY(lq_calib_windows(path, encode_cb, r->tok, nsam, seqlen,
                                r->m->cfg.max_position_embeddings, seed, text_max, &r->win,
                                r->err));
        lq_ccache_store_windows(&r->cache, &r->win);
    }
    int64_t T = r->win.nsamples * r->win.seqlen, d = r->m->cfg.hidden_size;
    int64_t cs    = plan_chunk(r, T);
    lq_be  *be    = r->be;
    r->chunk_seqs = cs;
    r->chunk_bytes = (size_t)(cs * r->win.seqlen * d) * sizeof(float);
    if (be->ops->alloc(be, (void **)&r->chunk, r->chunk_bytes) != LQ_OK)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory for a calibration chunk (%s)",
                lq_be_error(be));
    LQ_TRY(lq_fwd_ws_create_be(&r->m->cfg, cs * r->win.seqlen, r->win.seqlen, be, &r->ws, r->err));
    r->stage_bytes = r->mt->stage_copies > 0 ? r->chunk_bytes : 0;
    if (r->stage_bytes && be->ops->alloc(be, (void **)&r->stage, r->stage_bytes) != LQ_OK)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory for a calibration chunk (%s)",
                lq_be_error(be));
    int64_t budget = -1;
    LQ_TRY(plan_memory(r, T, &budget));
    r->spill_budget = budget;
    /* on a device, the activations (the layer's input and output, the method's stage states)
     * share half its memory; what does not fit stays on the host */
    if (!r->dev_budget_set)
        r->dev_budget =
            be->ops->device ? lq_gpu_mem_bytes(r->gpu) / 2 / (2 + r->mt->stage_copies) : -1;
    LQ_TRY(lq_acts_create(be, r->dev_budget, budget, r->spill_dir, &r->cur, r->err));
    LQ_TRY(lq_acts_create(be, r->dev_budget, budget, r->spill_dir, &r->nxt, r->err));
    float *emb = be->ops->device ? lq_malloc_n(cs * r->win.seqlen * d, sizeof(float)) : r->chunk;
    if (!emb)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory for a calibration chunk");
    lq_status st = LQ_OK;
    for (int64_t s0 = 0; s0 < r->win.nsamples && st == LQ_OK; s0 += cs) {
        int64_t ns = r->win.nsamples - s0 < cs ? r->win.nsamples - s0 : cs;
        st = lq_model_embed(r->m, r->win.ids + s0 * r->win.seqlen, ns * r->win.seqlen, emb, r->err);
        if (st == LQ_OK)
            st = lq_acts_append_host(r->cur, emb, ns * r->win.seqlen * d, r->err);
    }
    if (emb != r->chunk)
        free(emb);
    r->t_calib = lq_now() - t0;
    return st;
}

static int mixed_progress(void *user, int64_t layer, int64_t layers) {
    run *r = user;
    return progress(r, "sensitivity", layer, layers, r->t_mixed0, "bits per linear");
}

/* --target-bpw: measure, allocate, and record the widths as the checkpoint's base bits (the
 * width that holds most weights) plus one "dynamic" rule per other width and unit kind. The
 * rules name vLLM's fused modules too (qkv_proj, gate_up_proj), which is why a unit is what
 * vLLM fuses. */
static lq_status plan_mixed(run *r) {
    if (!r->o.set.target_bpw)
        return LQ_OK;
    const lq_model_config *c = &r->m->cfg;
    lq_mixed_opts          o;
    memset(&o, 0, sizeof o);
    o.group_size = r->o.group_size;
    LQ_TRY(parse_choices(&r->o, &o, r->err));
    o.target_bpw = r->o.target_bpw;
    o.sym        = r->o.sym;
    o.plan       = r->plan;
    o.ids        = r->win.ids;
    o.seqlen     = r->win.seqlen;
    o.nseq       = r->o.bpw_tokens / r->win.seqlen;
    o.nseq       = o.nseq < 1 ? 1 : o.nseq > r->win.nsamples ? r->win.nsamples : o.nseq;
    o.progress   = mixed_progress;
    o.user       = r;
    r->t_mixed0  = lq_now();
    /* the planner's forwards run over host arrays: on a device backend, a host workspace */
    lq_fwd_ws *hws = r->ws;
    if (r->be->ops->device)
        LQ_TRY(lq_fwd_ws_create(&r->m->cfg, lq_fwd_ws_max_tokens(r->ws), r->win.seqlen, &hws,
                                r->err));
    const lq_status st = lq_mixed_plan(r->m, &o, hws, &r->mixed, r->err);
    if (hws != r->ws)
        lq_fwd_ws_free(hws);
    LQ_TRY(st);
    r->lin_bits  = calloc((size_t)(c->num_layers * LQ_LIN_COUNT), 1);
    r->lin_group = calloc((size_t)(c->num_layers * LQ_LIN_COUNT), sizeof *r->lin_group);
    if (!r->lin_bits || !r->lin_group)
        LQ_FAIL(r->err, LQ_ERR_NOMEM, "out of memory");
    int64_t held[LQ_MIXED_MAX_CHOICES] = {0}, all = 0; /* weights held by each choice */
    for (int64_t i = 0; i < r->mixed.n_units; i++) {
        const lq_mixed_unit *u = &r->mixed.units[i];
        held[u->choice] += u->params;
        all += u->params;
        for (int l = 0; l < LQ_LIN_COUNT; l++)
            if (lq_mixed_unit_lins(u->unit) >> l & 1) {
                r->lin_bits[u->layer * LQ_LIN_COUNT + l]  = (int8_t)u->bits;
                r->lin_group[u->layer * LQ_LIN_COUNT + l] = u->group;
            }
    }
    int base = 0;
    for (int ci = 1; ci < o.n_choices; ci++)
        base = held[ci] > held[base] ? ci : base;
    r->qcfg.bits       = o.choices[base];
    r->qcfg.group_size = lq_mixed_choice_group(&o, base);
    int explicit_g     = 0;
    for (int ci = 0; ci < o.n_choices; ci++)
        explicit_g |= o.choice_group[ci] != 0;
    char summary[384] = "";
    for (int ci = 0; ci < o.n_choices; ci++) {
        const int     b      = o.choices[ci];
        const int64_t g      = lq_mixed_choice_group(&o, ci);
        char          gs[32] = "";
        if (explicit_g)
            snprintf(gs, sizeof gs, " g%lld", (long long)g);
        snprintf(summary + strlen(summary), sizeof summary - strlen(summary), "%s%d bits%s %.1f%%",
                 ci ? ", " : "", b, gs, all ? 100.0 * (double)held[ci] / (double)all : 0.0);
        for (int u = 0; u < LQ_MIXED_UNITS && ci != base; u++) {
            char pat[4096];
            int  n   = snprintf(pat, sizeof pat, "model\\.layers\\.(");
            int  any = 0;
            for (int64_t i = 0; i < r->mixed.n_units && n < (int)sizeof pat - 64; i++) {
                const lq_mixed_unit *mu = &r->mixed.units[i];
                if (mu->unit == u && mu->choice == ci)
                    n += snprintf(pat + n, sizeof pat - (size_t)n, "%s%lld", any++ ? "|" : "",
                                  (long long)mu->layer);
            }
            if (!any)
                continue;
            n += snprintf(pat + n, sizeof pat - (size_t)n, ")\\.(");
            for (int l = 0, k = 0; l < LQ_LIN_COUNT; l++)
                if (lq_mixed_unit_lins(u) >> l & 1) {
                    n = (int)lq_qrule_append_name(pat, sizeof pat, (size_t)n, k++ ? "|" : "");
                    n = (int)lq_qrule_append_name(pat, sizeof pat, (size_t)n,
                                                  lq_lin_name((lq_lin_id)l));
                }
            if (n >= (int)sizeof pat - 8)
                LQ_FAIL(r->err, LQ_ERR_INTERNAL, "--target-bpw: too many layers for one rule");
            snprintf(pat + n, sizeof pat - (size_t)n, ")$");
            /* the group size only where it differs from the base's (bits alone, as before) */
            LQ_TRY(lq_qconfig_add_rule(&r->qcfg, pat, 0, b, g != r->qcfg.group_size ? g : 0, -1, -1,
                                       "--target-bpw", r->err));
        }
    }
    if (r->cb && r->cb->log) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "mixed precision: %.4f bits per weight (target %g): %s; sensitivity of %lld "
                 "units on %lld tokens in %.1f s",
                 r->mixed.bpw, o.target_bpw, summary, (long long)r->mixed.n_units,
                 (long long)(o.nseq * o.seqlen), r->mixed.seconds);
        r->cb->log(LQ_LOG_INFO, msg, r->cb->user);
    }
    return LQ_OK;
}

/* Perplexity of m through the same path as `llmquant ppl` (lq_ppl_text). */
static lq_status ppl_of(run *r, lq_model *m, const char *data, lq_ppl_result *res) {
    lq_ppl_text_info info;
    return lq_ppl_text(m, r->tok, data, &r->o, r->gpu, r->cb, res, &info, r->err);
}

/* --check-ppl: original vs quantized (read back from the finished temporary directory, so the
 * check exercises the files exactly as a loader sees them). */
static lq_status check_ppl(run *r, const char *data) {
    lq_ppl_result a, b;
    LQ_TRY(ppl_of(r, r->m, data, &a));
    lq_model *q = NULL;
    LQ_TRY(lq_model_open(r->od.tmp_path, &q, r->err));
    lq_status st = ppl_of(r, q, data, &b);
    lq_model_free(q);
    LQ_TRY(st);
    double inc = (b.ppl / a.ppl - 1) * 100;
    r->check   = cJSON_CreateObject();
    cJSON_AddStringToObject(r->check, "data_file", data);
    cJSON_AddStringToObject(r->check, "protocol", r->o.protocol);
    cJSON_AddNumberToObject(r->check, "ctx", (double)a.ctx);
    cJSON_AddNumberToObject(r->check, "tokens_scored", (double)a.tokens_scored);
    cJSON_AddNumberToObject(r->check, "ppl_original", a.ppl);
    cJSON_AddNumberToObject(r->check, "ppl_quantized", b.ppl);
    cJSON_AddNumberToObject(r->check, "increase_percent", inc);
    int    bounded = r->o.set.max_ppl_increase;
    double bound   = r->o.max_ppl_increase;
    int    pass    = !bounded || inc <= bound;
    if (bounded)
        cJSON_AddNumberToObject(r->check, "max_increase_percent", bound);
    cJSON_AddBoolToObject(r->check, "passed", pass);
    if (!pass) {
        char p[4200];
        LQ_TRY(lq_outdir_path(&r->od, "PPL_CHECK_FAILED", p, sizeof p, r->err));
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "perplexity %.4f -> %.4f (+%.2f%%) exceeds the bound of %.2f%% on %s\n",
                    a.ppl, b.ppl, inc, bound, data);
            fclose(f);
        }
    }
    return LQ_OK;
}

static int64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int64_t        s = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char        p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            s += sb.st_size;
    }
    closedir(d);
    return s;
}

/* Mixture of experts: the calibration tokens the router sent each expert, per layer, and the
 * experts whose statistics came from every token instead. */
static void moe_report(const run *r, cJSON *j) {
    const int64_t E = r->m->cfg.num_experts, Lc = r->m->cfg.num_layers;
    cJSON        *mo = cJSON_AddObjectToObject(j, "experts");
    cJSON_AddStringToObject(mo, "calib", r->o.moe_calib);
    cJSON_AddNumberToObject(mo, "min_tokens", (double)r->o.moe_min_tokens);
    cJSON *tk  = cJSON_AddArrayToObject(mo, "tokens"),
          *fb  = cJSON_AddArrayToObject(mo, "all_tokens");
    int64_t lo = -1, hi = -1, nfb = 0;
    for (int64_t i = 0; i < Lc; i++) {
        cJSON *row = cJSON_CreateArray(), *frow = cJSON_CreateArray();
        for (int64_t e = 0; e < E; e++) {
            const int64_t t = r->moe_tokens[i * E + e];
            cJSON_AddItemToArray(row, cJSON_CreateNumber((double)t));
            if (r->moe_fallback[i * E + e]) {
                cJSON_AddItemToArray(frow, cJSON_CreateNumber((double)e));
                nfb++;
            }
            if (t >= 0) {
                lo = lo < 0 || t < lo ? t : lo;
                hi = t > hi ? t : hi;
            }
        }
        cJSON_AddItemToArray(tk, row);
        cJSON_AddItemToArray(fb, frow);
    }
    cJSON_AddNumberToObject(mo, "tokens_min", (double)lo);
    cJSON_AddNumberToObject(mo, "tokens_max", (double)hi);
    cJSON_AddNumberToObject(mo, "all_token_experts", (double)nfb);
}

static char *report(run *r, const char *method, const char *model_dir, const char *out_dir,
                    int ppl_failed) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "method", method);
    const int ct = fmt_ct(&r->o);
    cJSON_AddStringToObject(j, "format",
                            ct ? "compressed-tensors" : lq_qformat_get(r->mt->format)->name);
    cJSON_AddStringToObject(j, "checkpoint",
                            ct ? "compressed-tensors pack-quantized (llm-compressor)"
                               : lq_qformat_get(r->mt->format)->desc);
    cJSON_AddStringToObject(j, "model_dir", model_dir);
    cJSON_AddStringToObject(j, "out_dir", out_dir);
    cJSON_AddNumberToObject(j, "bits", r->qcfg.bits);
    cJSON_AddNumberToObject(j, "group_size", (double)r->qcfg.group_size);
    cJSON_AddNumberToObject(j, "layers", (double)r->m->cfg.num_layers);
    cJSON_AddNumberToObject(j, "quantized_linears", (double)r->n_quant);
    cJSON_AddNumberToObject(j, "unquantized_linears", (double)r->n_dense);
    cJSON *sk = cJSON_AddArrayToObject(j, "unquantized_modules");
    cJSON *sw = cJSON_AddObjectToObject(j, "unquantized_reasons");
    for (int i = 0; i < r->n_skipped; i++) {
        cJSON_AddItemToArray(sk, cJSON_CreateString(r->skipped[i]));
        for (int l = 0; l < LQ_SLOT_KINDS; l++) {
            char nm[128];
            lq_kind_name(&r->m->cfg, l, nm, sizeof nm);
            if (!strcmp(r->skipped[i], nm))
                cJSON_AddStringToObject(sw, r->skipped[i], r->why[l]);
        }
    }
    cJSON_AddNumberToObject(j, "cache_hits", (double)r->cache_hits);
    if (r->o.job_tag[0])
        cJSON_AddStringToObject(j, "job_tag", r->o.job_tag);
    if (r->win.nsamples) {
        cJSON_AddStringToObject(j, "calib", r->calib_source);
        cJSON_AddNumberToObject(j, "nsamples", (double)r->win.nsamples);
        cJSON_AddNumberToObject(j, "seqlen", (double)r->win.seqlen);
        cJSON_AddNumberToObject(j, "calib_seconds", r->t_calib);
        if (r->win.text_bytes > 0) { /* 0: the windows came from the cache */
            cJSON_AddNumberToObject(j, "calib_text_bytes", (double)r->win.text_bytes);
            cJSON_AddBoolToObject(j, "calib_text_truncated", r->win.text_truncated);
        }
    }
    if (r->mixed.n_units) {
        cJSON *mx = cJSON_AddObjectToObject(j, "mixed_precision");
        cJSON_AddNumberToObject(mx, "target_bpw", r->o.target_bpw);
        cJSON_AddNumberToObject(mx, "bpw", r->mixed.bpw);
        cJSON_AddNumberToObject(mx, "min_bpw", r->mixed.min_bpw);
        cJSON_AddNumberToObject(mx, "probe_bits", r->mixed.probe_bits);
        cJSON_AddNumberToObject(mx, "probe_group_size", (double)r->mixed.probe_group);
        cJSON_AddNumberToObject(mx, "seconds", r->mixed.seconds);
        cJSON *us = cJSON_AddArrayToObject(mx, "units");
        for (int64_t i = 0; i < r->mixed.n_units; i++) {
            const lq_mixed_unit *u = &r->mixed.units[i];
            cJSON               *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "layer", (double)u->layer);
            cJSON_AddStringToObject(o, "unit", lq_mixed_unit_name(u->unit));
            cJSON_AddNumberToObject(o, "bits", u->bits);
            cJSON_AddNumberToObject(o, "group_size", (double)u->group);
            cJSON_AddNumberToObject(o, "kl", u->kl);
            cJSON_AddItemToArray(us, o);
        }
    }
    cJSON *loss = cJSON_AddObjectToObject(j, "loss_sum");
    for (int l = 0; l < LQ_SLOT_KINDS; l++)
        if (kind_present(&r->m->cfg, l)) {
            char nm[128];
            lq_kind_name(&r->m->cfg, l, nm, sizeof nm);
            cJSON_AddNumberToObject(loss, nm, r->loss_sum[l]);
        }
    if (r->moe_tokens && r->mt->needs_calib)
        moe_report(r, j);
    cJSON_AddNumberToObject(j, "layer_seconds", r->t_layers);
    static const char *const ph_names[LQ_PH_COUNT] = {"read", "forward", "solve", "pack", "write"};
    cJSON *ph = cJSON_AddObjectToObject(j, "phase_seconds");
    cJSON_AddNumberToObject(ph, "calibrate", r->t_calib);
    for (int p = 0; p < LQ_PH_COUNT; p++)
        cJSON_AddNumberToObject(ph, ph_names[p], r->phase[p]);
    cJSON_AddNumberToObject(j, "seconds", lq_now() - r->t0);
    cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)lq_peak_rss_bytes());
    cJSON_AddStringToObject(j, "device", r->gpu ? lq_gpu_describe(r->gpu) : "cpu");
    if (r->gpu)
        cJSON_AddNumberToObject(j, "gpu_peak_bytes", (double)lq_gpu_peak_bytes(r->gpu));
    if (r->sink) {
        cJSON_DeleteItemFromObject(j, "format");
        cJSON_DeleteItemFromObject(j, "out_dir");
        cJSON_AddStringToObject(j, "model", model_dir);
        if (lq_gguf_sink_finish(r->sink, j, r->err) != LQ_OK) {
            cJSON_Delete(j);
            return NULL;
        }
    } else {
        cJSON_AddNumberToObject(j, "output_bytes", (double)dir_bytes(r->od.tmp_path));
    }
    if (r->check)
        cJSON_AddItemReferenceToObject(j, "ppl_check", r->check);
    cJSON_AddBoolToObject(j, "ppl_check_failed", ppl_failed);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* A partial run says up front what stays in float in every layer, and why. */
static void warn_unplanned(run *r) {
    for (int l = 0; l < LQ_SLOT_KINDS; l++)
        if (!r->plan[l] && kind_present(&r->m->cfg, l)) {
            int64_t n, k;
            char    msg[400], nm[128];
            lq_slot_shape(&r->m->cfg, lq_kind_slot(&r->m->cfg, l), &n, &k);
            lq_kind_name(&r->m->cfg, l, nm, sizeof nm);
            snprintf(msg, sizeof msg, "%s [%lld x %lld] stays unquantized in every layer: %s", nm,
                     (long long)n, (long long)k, r->why[l]);
            warn(r, msg);
        }
}

/* Everything but the decoder layers: embeddings, final norm, lm_head, config.json, the
 * tokenizer and side files; then the last shard. */
static lq_status write_rest(run *r) {
    const lq_model_config *c        = &r->m->cfg;
    int64_t                shape[2] = {c->vocab_size, c->hidden_size};
    if (r->sink) /* embeddings, norm and lm_head went in with the header */
        return LQ_OK;
    LQ_TRY(lq_st_writer_add_f32(r->wr, "model.embed_tokens.weight", r->odt, 2, shape, r->m->embed,
                                r->err));
    LQ_TRY(write_vec(r, "model.norm.weight", r->m->final_norm, c->hidden_size));
    if (!c->tie_word_embeddings)
        LQ_TRY(write_dense(r, "lm_head", &r->m->lm_head));
    LQ_TRY(write_config(r));
    LQ_TRY(copy_side_files(r));
    return lq_st_writer_finish(r->wr, r->err);
}

/* The report beside the output, then the output renamed into place. */
static lq_status commit(run *r, const char *method, const char *model_dir, const char *out_dir,
                        int ppl_failed, char **report_json) {
    char *rep = report(r, method, model_dir, out_dir, ppl_failed);
    char  rp[4200];
    if (r->sink) { /* the file is in place once the report is made; the work dir goes */
        if (!rep)
            return r->err->code ? r->err->code : lq_fail(r->err, LQ_ERR_NOMEM, "out of memory");
        if (report_json)
            *report_json = rep;
        else
            free(rep);
        return LQ_OK;
    }
    if (rep && lq_outdir_path(&r->od, "llmquant_report.json", rp, sizeof rp, r->err) == LQ_OK) {
        FILE *f = fopen(rp, "w");
        if (f) {
            fprintf(f, "%s\n", rep);
            fclose(f);
        }
    }
    const lq_status st = lq_outdir_commit(&r->od, r->err);
    if (st == LQ_OK && report_json)
        *report_json = rep;
    else
        free(rep);
    return st;
}

static void run_free(run *r) {
    lq_st_writer_free(r->wr);
    lq_outdir_abort(&r->od);
    cJSON_Delete(r->check);
    lq_fwd_ws_free(r->ws);
    lq_acts_free(r->cur);
    lq_acts_free(r->nxt);
    if (r->be && r->chunk)
        r->be->ops->release(r->be, r->chunk, r->chunk_bytes);
    if (r->be && r->stage)
        r->be->ops->release(r->be, r->stage, r->stage_bytes);
    lq_be_free(&r->be_dev);
    lq_be_free(&r->be_host);
    lq_windows_free(&r->win);
    lq_qconfig_free(&r->qcfg);
    lq_mixed_result_free(&r->mixed);
    free(r->lin_bits);
    free(r->lin_group);
    free(r->slot_out);
    free(r->slot_quantized);
    free(r->slot_loss);
    for (int64_t l = 0; r->slot_blocks && l < r->nslots; l++)
        free(r->slot_blocks[l]);
    free(r->slot_blocks);
    free(r->slot_ggml);
    lq_gguf_sink_free(r->sink);
    free(r->moe_mode);
    free(r->moe_tokens);
    free(r->moe_fallback);
    lq_tok_free(r->tok);
    lq_model_free(r->m);
    lq_gpu_close(r->gpu);
}

lq_status lq_quantize(const char *method, const char *model_dir, const char *out_dir,
                      const lq_params *p, const lq_callbacks *cb, char **report_json, lq_err *err) {
    return lq_quantize_be(method, model_dir, out_dir, p, cb, NULL, 0, report_json, err);
}

lq_status lq_quantize_be(const char *method, const char *model_dir, const char *out_dir,
                         const lq_params *p, const lq_callbacks *cb, lq_be *be, int64_t dev_budget,
                         char **report_json, lq_err *err) {
    if (report_json)
        *report_json = NULL;
    if (method && model_dir && out_dir && lq_method_index(method) >= 0) {
        lq_opts fo;
        LQ_TRY(lq_params_check_applies(p, method, err));
        lq_opts_read(p, &fo);
        if (fo.format[0] && !fmt_gguf(&fo) && !fmt_ct(&fo))
            LQ_FAIL(err, LQ_ERR_INVALID_ARG,
                    "--format %s: unknown (gguf:TYPE or compressed-tensors)", fo.format);
        if (fmt_gguf(&fo))
            LQ_TRY(lq_gguf_check(method, &fo, err));
        if (fmt_gguf(&fo) && !strcmp(method, "rtn")) /* no calibration: tensor by tensor */
            return lq_quantize_gguf(method, model_dir, out_dir, fo.format + 5, &fo, cb,
                                    report_json, err);
    }
    run r;
    memset(&r, 0, sizeof r);
    char      note[256] = "";
    lq_status vs        = validate(method, model_dir, out_dir, p, &r.o, note, sizeof note, err);
    if (vs != LQ_OK)
        return vs;
    r.t0                   = lq_now();
    r.mt                   = lq_method_traits_get(lq_method_index(method));
    r.cb                   = cb;
    r.err                  = err;
    lq_status   st         = LQ_OK;
    int         ppl_failed = 0;
    const char *odt        = r.o.out_dtype;
    if (!strcmp(odt, "float32"))
        LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG,
                     "--out-dtype float32: quantized checkpoints keep "
                     "their scales in float16 or bfloat16 (float32 is for convert)");
    if (note[0])
        warn(&r, note);
    r.odt = !strcmp(odt, "bfloat16") ? LQ_DT_BF16 : LQ_DT_F16;

    LQ_TRY_GOTO(lq_model_open(model_dir, &r.m, err));
    if (r.m->format != LQ_FMT_DENSE)
        LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED,
                     "%s: already quantized (%s); start from the "
                     "original checkpoint",
                     model_dir, lq_qformat_get(r.m->format)->name);
    const char *check    = r.o.check_ppl;
    int         need_tok = r.mt->needs_calib || (check && *check);
    const char *tp       = r.o.tokenizer;
    if (need_tok || (tp && *tp))
        LQ_TRY_GOTO(tp && *tp ? lq_tok_load_file(tp, &r.tok, err)
                              : lq_tok_load_source(r.m->src, &r.tok, err));
    LQ_TRY_GOTO(lq_device_pick(r.o.device, r.mt->gpu || r.mt->needs_calib, cb, &r.gpu, err));
    if (!strcmp(r.o.device, "cuda") && !r.mt->gpu && !r.mt->needs_calib) {
        /* said rather than ignored: a weights-only method has no device code */
        char msg[200];
        snprintf(msg, sizeof msg,
                 "%s rounds the weights alone, layer by layer as they are read: it runs on the "
                 "CPU (--device cuda has nothing to compute for it)",
                 r.mt->name);
        warn(&r, msg);
    }
    lq_be_init_host(&r.be_host, lq_ops_cpu(), 0);
    r.be             = be ? be : &r.be_host;
    r.dev_budget_set = be != NULL;
    r.dev_budget     = dev_budget;
    if (!be && r.gpu && r.mt->needs_calib) { /* the calibration forwards run on the device */
        const int prec = strcmp(r.o.device_precision, "f32") ? LQ_PREC_FAST : LQ_PREC_F32;
        LQ_TRY_GOTO(lq_be_init_cuda(&r.be_dev, lq_gpu_ctx(r.gpu), prec, err));
        r.be = &r.be_dev;
    }
    lq_qconfig_default(r.mt->format, &r.qcfg);
    r.mt->fill_qconfig(&r.o, &r.qcfg);
    LQ_TRY_GOTO(plan_linears(r.mt, &r.o, &r.m->cfg, model_dir, r.plan, r.why, err));
    warn_unplanned(&r);
    LQ_TRY_GOTO(alloc_slots(&r));
    snprintf(r.qcfg.torch_dtype, sizeof r.qcfg.torch_dtype, "%s",
             r.odt == LQ_DT_BF16 ? "bfloat16" : "float16");
    snprintf(r.qcfg.model_name_or_path, sizeof r.qcfg.model_name_or_path, "%s", out_dir);
    if (fmt_ct(&r.o))
        r.qcfg.container = LQ_CONTAINER_CT;
    if (fmt_gguf(&r.o)) {
        /* one file: a work directory beside it holds the temporary file and the spills, and
         * its lock keeps a second writer of the same output out */
        char work[4200];
        snprintf(work, sizeof work, "%s.lqwork", out_dir);
        LQ_TRY_GOTO(lq_outdir_begin(&r.od, work, 1, err));
        LQ_TRY_GOTO(lq_gguf_sink_open(method, model_dir, out_dir, r.o.format + 5, &r.o,
                                      r.od.tmp_path, cb, &r.sink, err));
    } else {
        LQ_TRY_GOTO(lq_outdir_begin(&r.od, out_dir, r.o.force, err));
    }
    r.spill_dir    = r.od.tmp_path; /* same filesystem the user chose for the output */
    r.nthreads_est = omp_get_max_threads();
    if (r.mt->needs_calib)
        LQ_TRY_GOTO(calibrate(&r));
    LQ_TRY_GOTO(plan_mixed(&r));
    if (!r.sink) {
        LQ_TRY_GOTO(lq_st_writer_create(r.od.tmp_path, r.o.max_shard_size, &r.wr, err));
        LQ_TRY_GOTO(lq_st_writer_set_metadata(r.wr, "format", "pt", err));
    }

    double tl = lq_now();
    LQ_TRY_GOTO(do_layers(&r));
    r.t_layers = lq_now() - tl;
    if (progress(&r, "write", 0, 1, lq_now(), out_dir))
        LQ_FAIL_GOTO(err, LQ_ERR_INTERRUPTED, "interrupted");
    LQ_TRY_GOTO(write_rest(&r));
    if (check && *check) {
        LQ_TRY_GOTO(check_ppl(&r, check));
        cJSON *pass = cJSON_GetObjectItem(r.check, "passed");
        ppl_failed  = pass && !cJSON_IsTrue(pass);
    }
    LQ_TRY_GOTO(commit(&r, method, model_dir, out_dir, ppl_failed, report_json));
    if (ppl_failed) {
        cJSON *c = r.check;
        st       = lq_fail(err, LQ_ERR_PPL_BOUND,
                           "%s: perplexity %.4f -> %.4f (+%.2f%%) exceeds --max-ppl-increase %.2f%%; "
                                 "output written and marked with PPL_CHECK_FAILED",
                           out_dir, cJSON_GetObjectItem(c, "ppl_original")->valuedouble,
                           cJSON_GetObjectItem(c, "ppl_quantized")->valuedouble,
                           cJSON_GetObjectItem(c, "increase_percent")->valuedouble,
                           cJSON_GetObjectItem(c, "max_increase_percent")->valuedouble);
    }
done:
    run_free(&r);
    return st;
}
