/* Hugging Face tokenizer.json with a BPE model, encoded as the `tokenizers` crate does:
 *   normalizer      NFC / NFKC (utf8proc), Prepend, Replace (string patterns), Sequence
 *   pre_tokenizer   Metaspace (prepend_scheme always|first|never, split), ByteLevel
 *                   (add_prefix_space, use_regex: the GPT-2 pattern), Split (Regex or String
 *                   pattern, Isolated behaviour; PCRE2 with Unicode properties), Sequence
 *   model           BPE: merges by rank (lowest first, leftmost on ties: word.rs merge_all),
 *                   byte_fallback (<0xNN>), unk_token with fuse_unk, ignore_merges
 *   post_processor  TemplateProcessing / Sequence: a leading special token is the BOS that
 *                   lq_tok_adds_bos reports
 *   added_tokens    split out of the raw text first (longest match, lstrip/rstrip), as
 *                   tokenizers' AddedVocabulary does: `tokenizer(text)` of the GPTQ/AWQ scripts
 *                   turns a literal "<|endoftext|>" into its id, and so do we
 * Anything else in the file that changes ids is refused with LQ_ERR_TOKENIZER_UNSUPPORTED. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lq_json.h"
#include "lq_tok_impl.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum { NORM_NFC = 1, NORM_NFKC, NORM_PREPEND, NORM_REPLACE };
enum { PRE_METASPACE = 1, PRE_BYTELEVEL, PRE_SPLIT };

typedef struct norm_step {
    int   kind;
    char *a, *b; /* Prepend: a; Replace: a -> b */
} norm_step;

typedef struct pre_step {
    int         kind;
    char        repl[8]; /* Metaspace replacement (UTF-8) */
    int         prepend; /* Metaspace: 0 never, 1 always, 2 first; ByteLevel: add_prefix_space */
    int         split;   /* Metaspace split / ByteLevel use_regex */
    pcre2_code *re;      /* Split / ByteLevel(use_regex) */
} pre_step;

typedef struct added_tok {
    int32_t id, len;
    int     lstrip, rstrip;
    char   *content;
} added_tok;

typedef struct merge_ent {
    int32_t a, b, rank, id;
} merge_ent;

struct lq_tok_hf {
    norm_step  norm[16];
    int        nnorm;
    pre_step   pre[16];
    int        npre;
    int        byte_level; /* vocab keys are GPT-2 byte-to-unicode strings */
    int        byte_fallback, fuse_unk, ignore_merges;
    int32_t    unk;
    merge_ent *merges; /* open addressing on (a, b) */
    uint64_t   mmask;
    char       bytemap[256][4]; /* byte -> its GPT-2 unicode character (UTF-8, NUL-ended) */
    added_tok *added;           /* longest first */
    int64_t    nadded;
    uint8_t    added_first[256]; /* first bytes of added tokens */
};

void lq_tok_hf_free(struct lq_tok_hf *hf) {
    if (!hf)
        return;
    for (int i = 0; i < hf->nnorm; i++) {
        free(hf->norm[i].a);
        free(hf->norm[i].b);
    }
    for (int i = 0; i < hf->npre; i++)
        pcre2_code_free(hf->pre[i].re);
    free(hf->merges);
    for (int64_t i = 0; i < hf->nadded; i++)
        free(hf->added[i].content);
    free(hf->added);
    free(hf);
}

/* ------------------------------------------------------------------------------------------
 * Growable byte buffer
 * ------------------------------------------------------------------------------------------ */
typedef struct sbuf {
    char   *p;
    int64_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, int64_t n) {
    if (b->n + n + 1 > b->cap) {
        int64_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, (size_t)c);
        if (!q)
            return -1;
        b->p   = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------ */
static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static lq_status compile_re(const char *pat, const char *label, pcre2_code **out, lq_err *err) {
    int        ec;
    PCRE2_SIZE eo;
    *out = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo,
                         NULL);
    if (!*out) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                "%s: pre-tokenizer regex not supported by PCRE2 at offset %zu: %s", label,
                (size_t)eo, (const char *)msg);
    }
    return LQ_OK;
}

/* GPT-2's pattern, which ByteLevel(use_regex=true) applies (tokenizers byte_level.rs). */
static const char k_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static lq_status add_norm(struct lq_tok_hf *hf, const cJSON *n, const char *label, lq_err *err) {
    if (!n || cJSON_IsNull(n))
        return LQ_OK;
    const char *ty = jstr(n, "type");
    if (!ty)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: normalizer without a type", label);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *e;
        cJSON_ArrayForEach(e, a) LQ_TRY(add_norm(hf, e, label, err));
        return LQ_OK;
    }
    if (hf->nnorm >= 16)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: more than 16 normalizers", label);
    norm_step *s = &hf->norm[hf->nnorm];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "NFC"))
        s->kind = NORM_NFC;
    else if (!strcmp(ty, "NFKC"))
        s->kind = NORM_NFKC;
    else if (!strcmp(ty, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p)
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: Prepend normalizer without text", label);
        s->kind = NORM_PREPEND;
        s->a    = strdup(p);
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char  *str = pat ? jstr(pat, "String") : NULL, *c = jstr(n, "content");
        if (!str || !c || !*str)
            LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                    "%s: Replace normalizer with a regex pattern is not supported", label);
        s->kind = NORM_REPLACE;
        s->a    = strdup(str);
        s->b    = strdup(c);
    } else {
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: normalizer \"%s\" is not supported", label,
                ty);
    }
    if ((s->kind == NORM_PREPEND && !s->a) || (s->kind == NORM_REPLACE && (!s->a || !s->b)))
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    hf->nnorm++;
    return LQ_OK;
}

static lq_status add_pre(struct lq_tok_hf *hf, const cJSON *n, const char *label, lq_err *err) {
    if (!n || cJSON_IsNull(n))
        return LQ_OK;
    const char *ty = jstr(n, "type");
    if (!ty)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: pre_tokenizer without a type", label);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *e;
        cJSON_ArrayForEach(e, a) LQ_TRY(add_pre(hf, e, label, err));
        return LQ_OK;
    }
    if (hf->npre >= 16)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: more than 16 pre-tokenizers", label);
    pre_step *s = &hf->pre[hf->npre];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "Metaspace")) {
        const char *r = jstr(n, "replacement"), *ps = jstr(n, "prepend_scheme");
        if (!r || !*r || strlen(r) >= sizeof s->repl) /* an empty one would never advance */
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: Metaspace replacement", label);
        s->kind = PRE_METASPACE;
        strcpy(s->repl, r);
        /* older files: add_prefix_space instead of prepend_scheme */
        s->prepend = ps ? (!strcmp(ps, "always")  ? 1
                           : !strcmp(ps, "first") ? 2
                                                  : 0)
                        : jbool(n, "add_prefix_space", 1);
        s->split   = jbool(n, "split", 1);
    } else if (!strcmp(ty, "ByteLevel")) {
        s->kind    = PRE_BYTELEVEL;
        s->prepend = jbool(n, "add_prefix_space", 1);
        s->split   = jbool(n, "use_regex", 1);
        if (s->split)
            LQ_TRY(compile_re(k_gpt2_re, label, &s->re, err));
        hf->byte_level = 1;
    } else if (!strcmp(ty, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char  *re = pat ? jstr(pat, "Regex") : NULL, *str = pat ? jstr(pat, "String") : NULL;
        const char  *beh = jstr(n, "behavior");
        if (jbool(n, "invert", 0) || !beh || strcmp(beh, "Isolated"))
            LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                    "%s: Split pre-tokenizer with behavior %s%s is not supported (Isolated only)",
                    label, beh ? beh : "?", jbool(n, "invert", 0) ? " inverted" : "");
        s->kind = PRE_SPLIT;
        if (re) {
            LQ_TRY(compile_re(re, label, &s->re, err));
        } else if (str) { /* a literal: quote it */
            sbuf q  = {0};
            int  ok = sb_put(&q, "\\Q", 2) == 0 && sb_put(&q, str, (int64_t)strlen(str)) == 0 &&
                     sb_put(&q, "\\E", 2) == 0;
            lq_status st = ok ? compile_re(q.p, label, &s->re, err)
                              : lq_fail(err, LQ_ERR_NOMEM, "out of memory");
            free(q.p);
            LQ_TRY(st);
        } else {
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: Split pre-tokenizer without a pattern",
                    label);
        }
    } else {
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: pre_tokenizer \"%s\" is not supported",
                label, ty);
    }
    hf->npre++;
    return LQ_OK;
}

static uint64_t pair_hash(int32_t a, int32_t b) {
    uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static const merge_ent *merge_find(const struct lq_tok_hf *hf, int32_t a, int32_t b) {
    if (!hf->merges)
        return NULL;
    for (uint64_t p = pair_hash(a, b) & hf->mmask;; p = (p + 1) & hf->mmask) {
        const merge_ent *m = &hf->merges[p];
        if (m->rank < 0)
            return NULL;
        if (m->a == a && m->b == b)
            return m;
    }
}

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the others to U+0100.. */
static void build_bytemap(struct lq_tok_hf *hf) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        int cp   = keep ? b : 256 + n++;
        utf8proc_ssize_t l = utf8proc_encode_char(cp, (utf8proc_uint8_t *)hf->bytemap[b]);
        hf->bytemap[b][l]  = 0;
    }
}

lq_status lq_tok_load_hf(const char *json, size_t len, const char *label, lq_tokenizer *t,
                         lq_err *err) {
    cJSON *root = NULL;
    LQ_TRY(lq_json_parse(json, len, label, &root, err));
    lq_status         st  = LQ_OK;
    struct lq_tok_hf *hf  = calloc(1, sizeof *hf);
    int32_t          *tmp = NULL;
    if (!hf)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
    t->hf           = hf;
    t->kind         = LQ_TOK_HF_JSON;
    const cJSON *m  = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char  *mt = m ? jstr(m, "type") : NULL;
    if (!cJSON_IsObject(m))
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: no \"model\" object", label);
    if (mt && strcmp(mt, "BPE"))
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                     "%s: tokenizer model \"%s\" is not supported (BPE only)", label, mt);
    if (jstr(m, "continuing_subword_prefix") || jstr(m, "end_of_word_suffix"))
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                     "%s: BPE subword prefix/suffix is not supported", label);
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble > 0)
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: BPE dropout is not supported", label);
    hf->byte_fallback = jbool(m, "byte_fallback", 0);
    hf->fuse_unk      = jbool(m, "fuse_unk", 0);
    hf->ignore_merges = jbool(m, "ignore_merges", 0);

    /* Vocabulary (+ added tokens, which may extend it) */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *e;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab))
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: model.vocab is not an object", label);
    int64_t n = 0;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (1 << 24))
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: vocab entry \"%s\" has a bad id", label,
                         e->string);
        n = (int64_t)e->valuedouble + 1 > n ? (int64_t)e->valuedouble + 1 : n;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
            !jstr(e, "content"))
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: malformed added token", label);
        n = (int64_t)id->valuedouble + 1 > n ? (int64_t)id->valuedouble + 1 : n;
    }
    if (n < 1)
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: empty vocabulary", label);
    t->n      = n;
    t->piece  = calloc((size_t)n, sizeof *t->piece);
    t->plen   = calloc((size_t)n, sizeof *t->plen);
    t->score  = calloc((size_t)n, sizeof *t->score);
    t->sorted = calloc((size_t)n, sizeof *t->sorted);
    tmp       = calloc((size_t)n, sizeof *tmp);
    if (!t->piece || !t->plen || !t->score || !t->sorted || !tmp)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    cJSON_ArrayForEach(e, vocab) {
        int64_t id = (int64_t)e->valuedouble;
        if (t->piece[id])
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: id %lld used twice in the vocab", label,
                         (long long)id);
        t->piece[id] = strdup(e->string);
        if (!t->piece[id])
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        t->plen[id] = (int32_t)strlen(e->string);
    }
    int64_t ns = 0;
    for (int64_t i = 0; i < n; i++)
        if (t->piece[i])
            t->sorted[ns++] = (int32_t)i;
    cJSON_ArrayForEach(e, added) { /* ids only the added tokens define: pieces for lq_tok_piece */
        int64_t id = (int64_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        if (!t->piece[id]) {
            t->piece[id] = strdup(jstr(e, "content"));
            if (!t->piece[id])
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
            t->plen[id] = (int32_t)strlen(t->piece[id]);
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (!t->piece[i]) { /* holes in the id space */
            t->piece[i] = calloc(1, 1);
            if (!t->piece[i])
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        }
    lq_tok_sort_ids(t, t->sorted, tmp, ns);
    t->nsorted = ns;
    LQ_TRY_GOTO(lq_tok_index(t, err));

    /* unk */
    hf->unk        = -1;
    const char *uk = jstr(m, "unk_token");
    if (uk && (hf->unk = lq_tok_lookup(t, uk, (int32_t)strlen(uk))) < 0)
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: unk_token \"%s\" not in the vocab", label,
                     uk);
    for (int b = 0; b < 256; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        t->byte_id[b] = lq_tok_lookup(t, p, 6);
    }

    /* Merges: "a b" strings (tokenizers < 0.20) or ["a", "b"] pairs. */
    const cJSON *mg  = cJSON_GetObjectItemCaseSensitive(m, "merges");
    int64_t      nm  = cJSON_GetArraySize(mg);
    uint64_t     cap = 16;
    while (cap < 2 * (uint64_t)nm + 2)
        cap *= 2;
    hf->merges = malloc(cap * sizeof *hf->merges);
    if (!hf->merges)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory for %lld merges", label, (long long)nm);
    for (uint64_t i = 0; i < cap; i++)
        hf->merges[i].rank = -1;
    hf->mmask    = cap - 1;
    int32_t rank = 0;
    sbuf    cat  = {0};
    cJSON_ArrayForEach(e, mg) {
        const char *a = NULL, *b = NULL;
        char        one[1024];
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            size_t      al = sp ? (size_t)(sp - e->valuestring) : 0;
            if (!sp || al >= sizeof one || strchr(sp + 1, ' ')) {
                free(cat.p);
                LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: merge %d \"%.60s\" is not \"a b\"",
                             label, rank, e->valuestring);
            }
            memcpy(one, e->valuestring, al);
            one[al] = 0;
            a       = one;
            b       = sp + 1;
        } else if (cJSON_GetArraySize(e) == 2) {
            a = cJSON_GetArrayItem(e, 0)->valuestring;
            b = cJSON_GetArrayItem(e, 1)->valuestring;
        }
        if (!a || !b) {
            free(cat.p);
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: merge %d is malformed", label, rank);
        }
        int32_t ia = lq_tok_lookup(t, a, (int32_t)strlen(a));
        int32_t ib = lq_tok_lookup(t, b, (int32_t)strlen(b));
        cat.n      = 0;
        if (sb_put(&cat, a, (int64_t)strlen(a)) || sb_put(&cat, b, (int64_t)strlen(b))) {
            free(cat.p);
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        }
        int32_t in = lq_tok_lookup(t, cat.p, (int32_t)cat.n);
        if (ia < 0 || ib < 0 || in < 0) {
            free(cat.p);
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT,
                         "%s: merge %d (\"%s\" + \"%s\") uses a token missing from the vocab",
                         label, rank, a, b);
        }
        uint64_t p = pair_hash(ia, ib) & hf->mmask;
        while (hf->merges[p].rank >= 0 && !(hf->merges[p].a == ia && hf->merges[p].b == ib))
            p = (p + 1) & hf->mmask;
        if (hf->merges[p].rank < 0) /* a repeated pair keeps its first (lowest) rank */
            hf->merges[p] = (merge_ent){ia, ib, rank, in};
        rank++;
    }
    free(cat.p);

    LQ_TRY_GOTO(add_norm(hf, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), label, err));
    LQ_TRY_GOTO(add_pre(hf, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), label, err));
    if (hf->byte_level)
        build_bytemap(hf);
    hf->added = calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof *hf->added);
    if (!hf->added)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
    cJSON_ArrayForEach(e, added) {
        const char *c = jstr(e, "content");
        if (!*c)
            continue;
        added_tok *a = &hf->added[hf->nadded];
        a->content   = strdup(c);
        if (!a->content)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        a->id     = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        a->len    = (int32_t)strlen(c);
        a->lstrip = jbool(e, "lstrip", 0);
        a->rstrip = jbool(e, "rstrip", 0);
        hf->added_first[(unsigned char)c[0]] = 1;
        hf->nadded++;
    }
    for (int64_t x = 1; x < hf->nadded; x++) /* longest first (insertion sort: few tokens) */
        for (int64_t y = x; y > 0 && hf->added[y].len > hf->added[y - 1].len; y--) {
            added_tok tmp_   = hf->added[y];
            hf->added[y]     = hf->added[y - 1];
            hf->added[y - 1] = tmp_;
        }

    /* BOS: the special token a TemplateProcessing "single" template starts with. */
    t->bos = t->eos = -1;
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    const cJSON *procs[8];
    int          np = 0;
    if (cJSON_IsObject(pp)) {
        const char *pt = jstr(pp, "type");
        if (pt && !strcmp(pt, "Sequence")) {
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) if (np < 8)
                procs[np++] = e;
        } else {
            procs[np++] = pp;
        }
    }
    for (int i = 0; i < np; i++) {
        const char *pt = jstr(procs[i], "type");
        if (!pt || strcmp(pt, "TemplateProcessing"))
            continue;
        const cJSON *first =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(procs[i], "single"), 0);
        const cJSON *sp  = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
        const char  *sid = sp ? jstr(sp, "id") : NULL;
        if (sid)
            cJSON_ArrayForEach(e, added) if (!strcmp(jstr(e, "content"), sid)) t->bos =
                (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    }
    t->adds_bos = t->bos >= 0;
    /* EOS for reporting: the conventional names */
    static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>",
                                            "<|im_end|>"};
    for (size_t i = 0; i < sizeof eos_names / sizeof *eos_names && t->eos < 0; i++)
        cJSON_ArrayForEach(e, added) if (!strcmp(jstr(e, "content"), eos_names[i])) t->eos =
            (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    if (t->bos < 0) { /* a model without a BOS template still names its BOS */
        static const char *const bos_names[] = {"<s>", "<|begin_of_text|>"};
        for (size_t i = 0; i < 2 && t->bos < 0; i++)
            cJSON_ArrayForEach(e, added) if (!strcmp(jstr(e, "content"), bos_names[i])) t->bos =
                (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    }
done:
    free(tmp);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Encoding
 * ------------------------------------------------------------------------------------------ */
static lq_status normalize(const struct lq_tok_hf *hf, const char *text, int64_t len, sbuf *out,
                           lq_err *err) {
    out->n = 0;
    if (sb_put(out, text, len))
        LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < hf->nnorm; i++) {
        const norm_step *s = &hf->norm[i];
        if (s->kind == NORM_NFC || s->kind == NORM_NFKC) {
            utf8proc_uint8_t *r = NULL;
            utf8proc_ssize_t  l = utf8proc_map((const utf8proc_uint8_t *)out->p, out->n, &r,
                                               UTF8PROC_STABLE | UTF8PROC_COMPOSE |
                                                   (s->kind == NORM_NFKC ? UTF8PROC_COMPAT : 0));
            if (l < 0)
                LQ_FAIL(err, LQ_ERR_CALIB_FORMAT, "tokenizer: text is not valid UTF-8 (%s)",
                        utf8proc_errmsg(l));
            out->n  = 0;
            int bad = sb_put(out, (const char *)r, l);
            free(r);
            if (bad)
                LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        } else if (s->kind == NORM_PREPEND) {
            if (out->n > 0) { /* tokenizers: Prepend leaves an empty string empty */
                sbuf n2 = {0};
                if (sb_put(&n2, s->a, (int64_t)strlen(s->a)) || sb_put(&n2, out->p, out->n)) {
                    free(n2.p);
                    LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
                }
                free(out->p);
                *out = n2;
            }
        } else if (s->kind == NORM_REPLACE) {
            sbuf    n2 = {0};
            int64_t al = (int64_t)strlen(s->a), bl = (int64_t)strlen(s->b);
            int     bad = sb_put(&n2, "", 0);
            for (int64_t j = 0; j < out->n && !bad;) {
                if (j + al <= out->n && !memcmp(out->p + j, s->a, (size_t)al)) {
                    bad = sb_put(&n2, s->b, bl);
                    j += al;
                } else {
                    bad = sb_put(&n2, out->p + j, 1);
                    j++;
                }
            }
            if (bad) {
                free(n2.p);
                LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
            }
            free(out->p);
            *out = n2;
        }
    }
    return LQ_OK;
}

/* Pre-tokens are spans [off[i], off[i+1]) of a working string; each step rewrites the string
 * and the spans. */
typedef struct words {
    sbuf     s;
    int64_t *off;
    int64_t  n, cap; /* n words: off[0..n] */
} words;

static int w_push(words *w, int64_t end) {
    if (w->n + 2 > w->cap) {
        int64_t  c = w->cap ? 2 * w->cap : 64;
        int64_t *o = realloc(w->off, (size_t)c * sizeof *o);
        if (!o)
            return -1;
        w->off = o;
        w->cap = c;
    }
    w->off[++w->n] = end;
    return 0;
}

/* Applies one pre-tokenizer to every word of *in, producing *out. first: whether the word is
 * at the start of the text (Metaspace "first"). */
static lq_status pre_apply(const struct lq_tok_hf *hf, const pre_step *p, const words *in,
                           words *out, int at_start, pcre2_match_data *md, lq_err *err) {
    out->s.n = 0;
    out->n   = 0;
    if (!out->off && w_push(out, 0))
        goto oom;
    out->off[0] = 0;
    if (sb_put(&out->s, "", 0))
        goto oom;
    for (int64_t wi = 0; wi < in->n; wi++) {
        const char *w  = in->s.p + in->off[wi];
        int64_t     wl = in->off[wi + 1] - in->off[wi];
        if (p->kind == PRE_METASPACE) {
            int64_t start = out->s.n, rl = (int64_t)strlen(p->repl);
            /* metaspace.rs: replace spaces, then prepend unless it already starts with one */
            int pre = p->prepend == 1 || (p->prepend == 2 && wi == 0 && at_start);
            if (pre && wl > 0 && w[0] != ' ' && !(wl >= rl && !memcmp(w, p->repl, (size_t)rl)))
                if (sb_put(&out->s, p->repl, rl))
                    goto oom;
            for (int64_t j = 0; j < wl; j++)
                if (sb_put(&out->s, w[j] == ' ' ? p->repl : w + j, w[j] == ' ' ? rl : 1))
                    goto oom;
            if (!p->split) {
                if (out->s.n > start && w_push(out, out->s.n))
                    goto oom;
                continue;
            }
            /* MergedWithNext: every replacement starts a new word */
            int64_t ws = start;
            for (int64_t j = start; j < out->s.n;) {
                if (j > ws && j + rl <= out->s.n && !memcmp(out->s.p + j, p->repl, (size_t)rl)) {
                    if (w_push(out, j))
                        goto oom;
                    ws = j;
                }
                j += (j + rl <= out->s.n && !memcmp(out->s.p + j, p->repl, (size_t)rl)) ? rl : 1;
            }
            if (out->s.n > ws && w_push(out, out->s.n))
                goto oom;
        } else {
            /* ByteLevel: optional leading space, optional GPT-2 split, then bytes -> chars.
             * Split: regex matches isolated, gaps kept. */
            sbuf tmp = {0};
            /* byte_level.rs: every pre-token not starting with a space gets one */
            if (p->kind == PRE_BYTELEVEL && p->prepend && wl > 0 && w[0] != ' ') {
                if (sb_put(&tmp, " ", 1)) {
                    free(tmp.p);
                    goto oom;
                }
            }
            if (sb_put(&tmp, w, wl)) {
                free(tmp.p);
                goto oom;
            }
            int64_t pos = 0, last = 0;
            while (p->re && pos <= tmp.n) {
                /* UTF validity is checked once per word, not at every match (O(n^2)) */
                int rc = pcre2_match(p->re, (PCRE2_SPTR)tmp.p, (PCRE2_SIZE)tmp.n, (PCRE2_SIZE)pos,
                                     pos > 0 ? PCRE2_NO_UTF_CHECK : 0, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH)
                    break;
                if (rc < 0) {
                    free(tmp.p);
                    LQ_FAIL(err, LQ_ERR_CALIB_FORMAT,
                            "tokenizer: pre-tokenizer regex failed on the text (PCRE2 error %d; "
                            "invalid UTF-8?)",
                            rc);
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                int64_t     ms = (int64_t)ov[0], me = (int64_t)ov[1];
                if (me == ms) { /* empty match: step one character */
                    pos = ms + 1;
                    while (pos < tmp.n && ((unsigned char)tmp.p[pos] & 0xc0) == 0x80)
                        pos++;
                    continue;
                }
                const int64_t seg[2][2] = {{last, ms}, {ms, me}};
                for (int k = 0; k < 2; k++) {
                    if (seg[k][1] <= seg[k][0])
                        continue;
                    for (int64_t j = seg[k][0]; j < seg[k][1]; j++) {
                        const char *c  = p->kind == PRE_BYTELEVEL
                                             ? hf->bytemap[(unsigned char)tmp.p[j]]
                                             : tmp.p + j;
                        int64_t     cl = p->kind == PRE_BYTELEVEL ? (int64_t)strlen(c) : 1;
                        if (sb_put(&out->s, c, cl)) {
                            free(tmp.p);
                            goto oom;
                        }
                    }
                    if (w_push(out, out->s.n)) {
                        free(tmp.p);
                        goto oom;
                    }
                }
                last = pos = me;
            }
            if (last < tmp.n) { /* the rest (no regex, or after the last match) */
                for (int64_t j = last; j < tmp.n; j++) {
                    const char *c =
                        p->kind == PRE_BYTELEVEL ? hf->bytemap[(unsigned char)tmp.p[j]] : tmp.p + j;
                    int64_t cl = p->kind == PRE_BYTELEVEL ? (int64_t)strlen(c) : 1;
                    if (sb_put(&out->s, c, cl)) {
                        free(tmp.p);
                        goto oom;
                    }
                }
                if (w_push(out, out->s.n)) {
                    free(tmp.p);
                    goto oom;
                }
            }
            free(tmp.p);
        }
    }
    return LQ_OK;
oom:
    LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
}

typedef struct bsym {
    int32_t id;
    int64_t prev, next, ver;
} bsym;

typedef struct ids_buf {
    int32_t *v;
    int64_t  n, cap;
} ids_buf;

static int ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        int64_t  c = b->cap ? 2 * b->cap : 1024;
        int32_t *v = realloc(b->v, (size_t)c * sizeof *v);
        if (!v)
            return -1;
        b->v   = v;
        b->cap = c;
    }
    b->v[b->n++] = id;
    return 0;
}

static int try_pair(const struct lq_tok_hf *hf, const bsym *s, int64_t a, heap *h) {
    int64_t b = s[a].next;
    if (b < 0)
        return 0;
    const merge_ent *m = merge_find(hf, s[a].id, s[b].id);
    if (!m)
        return 0;
    /* max-heap on score: the lowest rank is the highest score */
    cand c = {-(float)m->rank, m->id, a, b, (int32_t)s[a].ver, (int32_t)s[b].ver};
    return lq_tok_heap_push(h, c);
}

/* One pre-token through the BPE model (tokenizers models/bpe/model.rs + word.rs). */
static lq_status bpe_word(const lq_tokenizer *t, const char *w, int64_t wl, bsym **sym,
                          int64_t *symcap, heap *h, ids_buf *out, lq_err *err) {
    const struct lq_tok_hf *hf = t->hf;
    if (hf->ignore_merges && wl < (1 << 30)) {
        int32_t id = lq_tok_lookup(t, w, (int32_t)wl);
        if (id >= 0)
            return ids_push(out, id) ? lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory")
                                     : LQ_OK;
    }
    if (wl + 1 > *symcap) {
        bsym *ns = realloc(*sym, (size_t)(wl + 1) * sizeof *ns);
        if (!ns)
            LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        *sym    = ns;
        *symcap = wl + 1;
    }
    bsym   *s        = *sym;
    int64_t n        = 0;
    int     prev_unk = 0;
    for (int64_t i = 0; i < wl;) {
        int32_t  l = 1;
        unsigned c = (unsigned char)w[i];
        l          = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : 4;
        if (i + l > wl)
            l = (int32_t)(wl - i);
        int32_t id = lq_tok_lookup(t, w + i, l);
        if (id >= 0) {
            s[n] = (bsym){id, n - 1, -1, 0};
            n++;
            prev_unk = 0;
        } else {
            int all = hf->byte_fallback;
            for (int32_t k = 0; k < l && all; k++)
                all = t->byte_id[(unsigned char)w[i + k]] >= 0;
            if (all) {
                for (int32_t k = 0; k < l; k++) {
                    s[n] = (bsym){t->byte_id[(unsigned char)w[i + k]], n - 1, -1, 0};
                    n++;
                }
                prev_unk = 0;
            } else if (hf->unk >= 0) {
                if (!(hf->fuse_unk && prev_unk)) {
                    s[n] = (bsym){hf->unk, n - 1, -1, 0};
                    n++;
                }
                prev_unk = 1;
            } else {
                LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT,
                        "%s: \"%.*s\" is not in the vocabulary and there is no unk_token", t->path,
                        (int)l, w + i);
            }
        }
        i += l;
    }
    for (int64_t i = 0; i < n; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < n ? i + 1 : -1;
    }
    h->n = 0;
    for (int64_t i = 0; i + 1 < n; i++)
        if (try_pair(hf, s, i, h) < 0)
            LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    while (h->n > 0) {
        cand c = lq_tok_heap_pop(h);
        if ((int32_t)s[c.left].ver != c.lver || (int32_t)s[c.right].ver != c.rver ||
            s[c.left].next != c.right)
            continue;
        int64_t a = c.left, b = c.right;
        s[a].id = c.id;
        s[a].ver++;
        s[b].ver++;
        s[b].id   = -1;
        s[a].next = s[b].next;
        if (s[b].next >= 0)
            s[s[b].next].prev = a;
        if ((s[a].prev >= 0 && try_pair(hf, s, s[a].prev, h) < 0) || try_pair(hf, s, a, h) < 0)
            LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int64_t i = n > 0 ? 0 : -1; i >= 0; i = s[i].next)
        if (ids_push(out, s[i].id))
            LQ_FAIL(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    return LQ_OK;
}

static lq_status encode_segment(const lq_tokenizer *t, const char *text, int64_t len, int at_start,
                                words *wa, words *wb, bsym **sym, int64_t *symcap, heap *h,
                                pcre2_match_data *md, ids_buf *out, lq_err *err);

lq_status lq_tok_encode_hf(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                           int32_t **ids, int64_t *n_ids, lq_err *err) {
    const struct lq_tok_hf *hf = t->hf;
    words                   a = {0}, b = {0};
    ids_buf                 out    = {0};
    bsym                   *sym    = NULL;
    int64_t                 symcap = 0;
    heap                    h      = {0};
    lq_status               st     = LQ_OK;
    pcre2_match_data       *md     = NULL;
    if (add_bos && t->bos >= 0 && ids_push(&out, t->bos))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    md = pcre2_match_data_create(4, NULL);
    if (!md)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    for (int64_t pos = 0; pos < len;) {
        /* next added token at or after pos */
        int64_t          at = len, seg_end = len, next = len;
        const added_tok *tok = NULL;
        for (int64_t i = pos; i < len && !tok; i++) {
            if (!hf->added_first[(unsigned char)text[i]])
                continue;
            for (int64_t k = 0; k < hf->nadded; k++)
                if (hf->added[k].len <= len - i &&
                    !memcmp(text + i, hf->added[k].content, (size_t)hf->added[k].len)) {
                    tok = &hf->added[k];
                    at  = i;
                    break;
                }
        }
        seg_end = at;
        next    = at;
        if (tok) {
            next = at + tok->len;
            if (tok->lstrip)
                while (seg_end > pos && (text[seg_end - 1] == ' ' || text[seg_end - 1] == '\t' ||
                                         text[seg_end - 1] == '\n' || text[seg_end - 1] == '\r'))
                    seg_end--;
            if (tok->rstrip)
                while (next < len && (text[next] == ' ' || text[next] == '\t' ||
                                      text[next] == '\n' || text[next] == '\r'))
                    next++;
        }
        if (seg_end > pos)
            LQ_TRY_GOTO(encode_segment(t, text + pos, seg_end - pos, pos == 0, &a, &b, &sym,
                                       &symcap, &h, md, &out, err));
        if (tok && ids_push(&out, tok->id))
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        pos = next;
    }
    *ids   = out.v;
    *n_ids = out.n;
    out.v  = NULL;
done:
    free(out.v);
    free(a.s.p);
    free(a.off);
    free(b.s.p);
    free(b.off);
    free(sym);
    free(h.v);
    pcre2_match_data_free(md);
    return st;
}

/* One stretch of text between added tokens: normalize, pre-tokenize, BPE. */
static lq_status encode_segment(const lq_tokenizer *t, const char *text, int64_t len, int at_start,
                                words *wa, words *wb, bsym **sym, int64_t *symcap, heap *h,
                                pcre2_match_data *md, ids_buf *out, lq_err *err) {
    const struct lq_tok_hf *hf = t->hf;
    words                   a = *wa, b = *wb;
    lq_status               st = LQ_OK;
    LQ_TRY_GOTO(normalize(hf, text, len, &a.s, err));
    if (w_push(&a, 0))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    a.n      = 0;
    a.off[0] = 0;
    if (a.s.n > 0 && w_push(&a, a.s.n))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; i < hf->npre; i++) {
        LQ_TRY_GOTO(pre_apply(hf, &hf->pre[i], &a, &b, at_start, md, err));
        words x = a;
        a       = b;
        b       = x;
    }
    for (int64_t wi = 0; wi < a.n; wi++)
        LQ_TRY_GOTO(
            bpe_word(t, a.s.p + a.off[wi], a.off[wi + 1] - a.off[wi], sym, symcap, h, out, err));
done:
    *wa = a;
    *wb = b;
    return st;
}
