/* HF tokenizer.json with a BPE model, encoded the way the `tokenizers` library does:
 *   added tokens (non-normalized ones matched on the raw text, leftmost-longest) ->
 *   normalizer per remaining split (Prepend, Replace, NF[K]C/D, Lowercase, Strip, Sequence) ->
 *   normalized added tokens -> pre-tokenizers (ByteLevel, Split, Metaspace, Digits,
 *   Whitespace[Split], Sequence; regexes through PCRE2 in UTF+UCP mode) ->
 *   BPE per word (merge ranks, byte_fallback, unk/fuse_unk, ignore_merges).
 * Special added tokens are not recognized in the text (text is text, like tokenizers with
 * encode_special_tokens = True); non-special ones are. Ill-formed UTF-8 input is replaced by
 * U+FFFD per maximal ill-formed subpart, as Rust's from_utf8_lossy does. */
#include "lq_json.h"
#include "lq_tok_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum { N_SEQ, N_PREPEND, N_REPLACE, N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_STRIP };
typedef struct hnorm {
    int           type;
    char         *a, *b; /* Prepend: a; Replace: a -> b */
    int64_t       alen, blen;
    int           left, right;
    struct hnorm *sub;
    int64_t       nsub;
} hnorm;

enum { B_ISOLATED, B_REMOVED, B_PREV, B_NEXT, B_CONTIG };
enum { P_SEQ, P_BYTELEVEL, P_SPLIT, P_METASPACE };
typedef struct hpre {
    int          type;
    int          add_prefix_space, use_regex; /* ByteLevel */
    pcre2_code  *re;                          /* Split / Metaspace split pattern */
    int          behavior, invert;
    char         rep[8];
    int          rep_len, prepend, split; /* Metaspace; prepend 0 never, 1 first, 2 always */
    struct hpre *sub;
    int64_t      nsub;
} hpre;

typedef struct hadded {
    int32_t id;
    char   *pat; /* content, or normalized content for normalized tokens */
    int64_t len;
    int     special, single_word, lstrip, rstrip, normalized;
} hadded;

typedef struct pent {
    uint64_t key;
    int32_t  rank, id; /* id -1 = empty */
} pent;

/* Byte trie over one set of added tokens. Node 0 is the root; edges live in one
 * open-addressing hash (node, byte) -> child, so matching at a position costs the length of the
 * longest token there, however many tokens share a prefix (a list per first byte was scanned in
 * full: 100k added tokens with one first byte took 11 s over 20k characters). */
typedef struct atrie {
    int32_t  *term; /* node -> added[] index of the token ending there, or -1 */
    int64_t   nn;
    uint64_t *key; /* ((node << 8) | byte) + 1; 0 = empty slot */
    int32_t  *child;
    uint64_t  mask; /* hash slots - 1 (a power of two minus one) */
} atrie;

static uint64_t trie_slot(const atrie *tr, uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ull >> 17) & tr->mask;
}

static int32_t trie_child(const atrie *tr, int32_t node, unsigned char c) {
    const uint64_t key = (((uint64_t)node << 8) | c) + 1;
    for (uint64_t i = trie_slot(tr, key);; i = (i + 1) & tr->mask) {
        if (tr->key[i] == key)
            return tr->child[i];
        if (!tr->key[i])
            return -1;
    }
}

static void trie_free(atrie *tr) {
    free(tr->term), free(tr->key), free(tr->child);
    memset(tr, 0, sizeof *tr);
}

struct lq_tok_hf {
    hnorm      *norm;
    hpre       *pre;
    lq_tok_map  vocab;
    pent       *pairs;
    int64_t     pcap;
    int32_t     unk, byte_tok[256];
    int         byte_fallback, fuse_unk, ignore_merges, has_unk_token;
    int         ws_cut; /* no merge crosses a U+2581 that follows another character */
    hadded     *added;
    int64_t     nadded;
    atrie       trie[2]; /* per set (0 raw, 1 normalized): the added tokens' byte trie */
    int         nbytelevel;
    char        bmap[256][2]; /* GPT-2 bytes_to_unicode, as UTF-8 (1 or 2 bytes) */
    uint8_t     bmap_len[256];
    pcre2_code *gpt2;
};

static void norm_free(hnorm *n) {
    if (!n)
        return;
    for (int64_t i = 0; i < n->nsub; i++)
        norm_free(&n->sub[i]);
    free(n->sub);
    free(n->a);
    free(n->b);
}

static void pre_free(hpre *p) {
    if (!p)
        return;
    for (int64_t i = 0; i < p->nsub; i++)
        pre_free(&p->sub[i]);
    free(p->sub);
    pcre2_code_free(p->re);
}

void lq_tok_hf_free(lq_tok_hf *h) {
    if (!h)
        return;
    if (h->norm) {
        norm_free(h->norm);
        free(h->norm);
    }
    if (h->pre) {
        pre_free(h->pre);
        free(h->pre);
    }
    lq_tok_map_free(&h->vocab);
    free(h->pairs);
    for (int64_t i = 0; i < h->nadded; i++)
        free(h->added[i].pat);
    free(h->added);
    trie_free(&h->trie[0]);
    trie_free(&h->trie[1]);
    pcre2_code_free(h->gpt2);
    free(h);
}

/* ---------------------------------------------------------------------------------------- */
/* Merge-pair map: (left id, right id) -> (rank, merged id). Later duplicates win, as in the
 * HashMap tokenizers collects the merges into. */
static uint64_t pkey(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static int64_t pslot(const lq_tok_hf *h, uint64_t key) {
    uint64_t x = key * 0x9e3779b97f4a7c15ull;
    int64_t  i = (int64_t)((x ^ (x >> 31)) & (uint64_t)(h->pcap - 1));
    while (h->pairs[i].id >= 0 && h->pairs[i].key != key)
        i = (i + 1) & (h->pcap - 1);
    return i;
}

static const pent *pair_get(const lq_tok_hf *h, int32_t a, int32_t b) {
    if (!h->pairs)
        return NULL;
    const pent *e = &h->pairs[pslot(h, pkey(a, b))];
    return e->id >= 0 ? e : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Loading. */

#define HF_BAD(...)   return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, __VA_ARGS__)
#define HF_UNSUP(...) return lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED, __VA_ARGS__)
#define HF_NOMEM()    return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path)

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int jbool(const cJSON *o, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static int valid_utf8(const char *s, int64_t n) {
    for (int64_t i = 0; i < n;) {
        uint32_t cp;
        int      k = lq_tok_utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

static lq_status compile_re(const char *pat, int64_t n, int literal, pcre2_code **out,
                            const lq_tokenizer *t, lq_err *err) {
    int        ec;
    PCRE2_SIZE eo;
    if (!valid_utf8(pat, n))
        HF_BAD("%s: pattern is not valid UTF-8", t->path);
    *out = pcre2_compile((PCRE2_SPTR)pat, (PCRE2_SIZE)n,
                         PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &ec, &eo, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        HF_UNSUP("%s: regex /%.80s/ not supported by PCRE2 at offset %zu: %s", t->path, pat,
                 (size_t)eo, (const char *)msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* optional speed-up; interpreter otherwise */
    return LQ_OK;
}

/* {"String": s} or {"Regex": r} -> compiled pattern. */
static lq_status load_pattern(const cJSON *p, pcre2_code **out, const lq_tokenizer *t,
                              lq_err *err) {
    const char *s = jstr(p, "String");
    if (s)
        return compile_re(s, (int64_t)strlen(s), 1, out, t, err);
    s = jstr(p, "Regex");
    if (s)
        return compile_re(s, (int64_t)strlen(s), 0, out, t, err);
    HF_BAD("%s: pattern is neither {\"String\"} nor {\"Regex\"}", t->path);
}

static lq_status load_norm(const cJSON *j, hnorm *n, int depth, const lq_tokenizer *t,
                           lq_err *err) {
    const char *ty = jstr(j, "type");
    if (!ty)
        HF_BAD("%s: normalizer without a type", t->path);
    if (depth > 8)
        HF_UNSUP("%s: normalizers nested too deeply", t->path);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(a))
            HF_BAD("%s: Sequence normalizer without \"normalizers\"", t->path);
        n->type = N_SEQ;
        n->nsub = cJSON_GetArraySize(a);
        n->sub  = calloc((size_t)(n->nsub ? n->nsub : 1), sizeof *n->sub);
        if (!n->sub)
            HF_NOMEM();
        int64_t      i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) LQ_TRY(load_norm(e, &n->sub[i++], depth + 1, t, err));
        return LQ_OK;
    }
    if (!strcmp(ty, "Prepend")) {
        const char *p = jstr(j, "prepend");
        if (!p)
            HF_BAD("%s: Prepend normalizer without \"prepend\"", t->path);
        n->type = N_PREPEND;
        n->alen = (int64_t)strlen(p);
        if (!(n->a = lq_strndup(p, n->alen)))
            HF_NOMEM();
        return LQ_OK;
    }
    if (!strcmp(ty, "Replace")) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char  *s = p ? jstr(p, "String") : NULL, *c = jstr(j, "content");
        if (p && jstr(p, "Regex"))
            HF_UNSUP("%s: Replace normalizer with a regex pattern is not supported", t->path);
        if (!s || !c || !*s)
            HF_BAD("%s: Replace normalizer needs a String pattern and a content", t->path);
        n->type = N_REPLACE;
        n->alen = (int64_t)strlen(s);
        n->blen = (int64_t)strlen(c);
        if (!(n->a = lq_strndup(s, n->alen)) || !(n->b = lq_strndup(c, n->blen)))
            HF_NOMEM();
        return LQ_OK;
    }
    static const char *const simple[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase"};
    for (int k = 0; k < 5; k++)
        if (!strcmp(ty, simple[k])) {
            n->type = N_NFC + k;
            return LQ_OK;
        }
    if (!strcmp(ty, "Strip")) {
        n->type  = N_STRIP;
        n->left  = jbool(j, "strip_left", 1);
        n->right = jbool(j, "strip_right", 1);
        return LQ_OK;
    }
    HF_UNSUP("%s: normalizer \"%.40s\" is not supported", t->path, ty);
}

static lq_status load_pre(const cJSON *j, hpre *p, int depth, lq_tokenizer *t, lq_err *err) {
    const char *ty = jstr(j, "type");
    if (!ty)
        HF_BAD("%s: pre_tokenizer without a type", t->path);
    if (depth > 8)
        HF_UNSUP("%s: pre_tokenizers nested too deeply", t->path);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers");
        if (!cJSON_IsArray(a))
            HF_BAD("%s: Sequence pre_tokenizer without \"pretokenizers\"", t->path);
        p->type = P_SEQ;
        p->nsub = cJSON_GetArraySize(a);
        p->sub  = calloc((size_t)(p->nsub ? p->nsub : 1), sizeof *p->sub);
        if (!p->sub)
            HF_NOMEM();
        int64_t      i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) LQ_TRY(load_pre(e, &p->sub[i++], depth + 1, t, err));
        return LQ_OK;
    }
    if (!strcmp(ty, "ByteLevel")) {
        /* each pass maps every byte to a character of up to 2 bytes: n passes grow the text
         * 2^n times (16 in a Sequence took minutes and gigabytes); no trained tokenizer has two */
        if (++t->hf->nbytelevel > 1)
            HF_UNSUP("%s: more than one ByteLevel pre-tokenizer (each pass maps bytes to "
                     "characters again, doubling the text)",
                     t->path);
        p->type             = P_BYTELEVEL;
        p->add_prefix_space = jbool(j, "add_prefix_space", 1);
        p->use_regex        = jbool(j, "use_regex", 1);
        if (p->use_regex && !t->hf->gpt2) {
            static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                       "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            LQ_TRY(compile_re(gpt2, (int64_t)strlen(gpt2), 0, &t->hf->gpt2, t, err));
        }
        return LQ_OK;
    }
    if (!strcmp(ty, "Split")) {
        const cJSON             *pat   = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char              *b     = jstr(j, "behavior");
        static const char *const beh[] = {"Isolated", "Removed", "MergedWithPrevious",
                                          "MergedWithNext", "Contiguous"};
        p->type                        = P_SPLIT;
        p->behavior                    = -1;
        for (int k = 0; b && k < 5; k++)
            if (!strcmp(b, beh[k]))
                p->behavior = k;
        if (!pat || p->behavior < 0)
            HF_BAD("%s: Split pre_tokenizer needs a pattern and a known behavior", t->path);
        p->invert = jbool(j, "invert", 0);
        return load_pattern(pat, &p->re, t, err);
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *r  = jstr(j, "replacement");
        const char *ps = jstr(j, "prepend_scheme");
        p->type        = P_METASPACE;
        if (!r)
            r = "\xe2\x96\x81";
        uint32_t cp;
        int      k = lq_tok_utf8_dec((const unsigned char *)r, (int64_t)strlen(r), &cp);
        if (!k || r[k])
            HF_BAD("%s: Metaspace replacement must be one character", t->path);
        memcpy(p->rep, r, (size_t)k);
        p->rep_len = k;
        if (ps)
            p->prepend = !strcmp(ps, "always") ? 2 : !strcmp(ps, "first") ? 1 : 0;
        else
            p->prepend = jbool(j, "add_prefix_space", 1) ? 2 : 0;
        if (ps && strcmp(ps, "always") && strcmp(ps, "first") && strcmp(ps, "never"))
            HF_BAD("%s: Metaspace prepend_scheme \"%.20s\" unknown", t->path, ps);
        p->split    = jbool(j, "split", 1);
        p->behavior = B_NEXT;
        return compile_re(p->rep, k, 1, &p->re, t, err);
    }
    /* The rest reduce to a regex split; tokenizers' char classes approximated by Unicode
     * properties (char::is_numeric = \p{N}; \w / \s as Unicode classes). */
    const char *re = NULL;
    p->type        = P_SPLIT;
    if (!strcmp(ty, "Digits")) {
        re          = jbool(j, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+";
        p->behavior = B_ISOLATED;
    } else if (!strcmp(ty, "Whitespace")) {
        re          = "\\w+|[^\\w\\s]+";
        p->behavior = B_REMOVED;
        p->invert   = 1;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        re          = "\\s+";
        p->behavior = B_REMOVED;
    } else {
        HF_UNSUP("%s: pre_tokenizer \"%.40s\" is not supported", t->path, ty);
    }
    return compile_re(re, (int64_t)strlen(re), 0, &p->re, t, err);
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to
 * U+0100.. in byte order. */
static void init_bmap(lq_tok_hf *h) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int      keep  = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        uint32_t cp    = keep ? (uint32_t)b : next++;
        h->bmap_len[b] = (uint8_t)lq_tok_utf8_enc(cp, h->bmap[b]);
    }
}

static int32_t jid(const cJSON *v) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= LQ_TOK_MAX_VOCAB ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return -1;
    return (int32_t)v->valuedouble;
}

/* Apply the normalizer to s[0..n) into a malloc'd string. */
static lq_status normalize(const hnorm *nm, const char *s, int64_t n, int cont, char **out,
                           int64_t *on, lq_err *err);

static lq_status load_model(const cJSON *m, lq_tokenizer *t, lq_err *err) {
    lq_tok_hf  *h  = t->hf;
    const char *ty = jstr(m, "type");
    if (ty && strcmp(ty, "BPE"))
        HF_UNSUP("%s: model type \"%.40s\" is not supported (BPE only)", t->path, ty);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if (v && !cJSON_IsNull(v))
        HF_UNSUP("%s: BPE dropout is not supported", t->path);
    const char *cp = jstr(m, "continuing_subword_prefix"), *ew = jstr(m, "end_of_word_suffix");
    if ((cp && *cp) || (ew && *ew))
        HF_UNSUP("%s: continuing_subword_prefix / end_of_word_suffix are not supported", t->path);
    h->byte_fallback    = jbool(m, "byte_fallback", 0);
    h->fuse_unk         = jbool(m, "fuse_unk", 0);
    h->ignore_merges    = jbool(m, "ignore_merges", 0);
    const cJSON *vocab  = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsObject(vocab))
        HF_BAD("%s: model has no \"vocab\" object", t->path);
    if (merges && !cJSON_IsArray(merges))
        HF_BAD("%s: model \"merges\" is not an array", t->path);
    return LQ_OK;
}

static lq_status load_vocab(const cJSON *root, const cJSON *m, lq_tokenizer *t, lq_err *err) {
    lq_tok_hf   *h     = t->hf;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *e;
    int64_t      n = 0, nv = 0;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = jid(e);
        if (id < 0 || !e->string)
            HF_BAD("%s: vocab entry %lld has a bad id", t->path, (long long)nv);
        if (id + 1 > n)
            n = id + 1;
        nv++;
    }
    if (added && !cJSON_IsArray(added))
        HF_BAD("%s: \"added_tokens\" is not an array", t->path);
    cJSON_ArrayForEach(e, added) {
        int32_t id = jid(cJSON_GetObjectItemCaseSensitive(e, "id"));
        if (id < 0 || !jstr(e, "content") || !*jstr(e, "content"))
            HF_BAD("%s: added token with a bad id or content", t->path);
        if (id + 1 > n)
            n = id + 1;
    }
    if (n < 1)
        HF_BAD("%s: empty vocab", t->path);
    LQ_TRY(lq_tok_alloc_pieces(t, n, err));
    if (lq_tok_map_init(&h->vocab, nv) < 0)
        HF_NOMEM();
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = jid(e);
        int64_t l  = (int64_t)strlen(e->string);
        if (l > LQ_TOK_MAX_PIECE)
            HF_BAD("%s: vocab token %d is %lld bytes long", t->path, id, (long long)l);
        if (t->piece[id])
            HF_BAD("%s: id %d used twice in the vocab", t->path, id);
        if (!(t->piece[id] = lq_strndup(e->string, l)))
            HF_NOMEM();
        t->plen[id] = (int32_t)l;
        int rc      = lq_tok_map_put(&h->vocab, t->piece[id], (int32_t)l, id);
        if (rc < 0)
            HF_NOMEM();
        /* tokenizers' vocab is a HashMap from token to id: a repeated key keeps the last id */
        if (rc == 0)
            HF_BAD("%s: token \"%.40s\" appears twice in the vocab", t->path, e->string);
    }
    return LQ_OK;
}

static lq_status load_merges(const cJSON *m, lq_tokenizer *t, lq_err *err) {
    lq_tok_hf   *h      = t->hf;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    int64_t      nm     = merges ? cJSON_GetArraySize(merges) : 0;
    h->pcap             = 16;
    while (h->pcap < 2 * nm + 2)
        h->pcap *= 2;
    h->pairs  = malloc((size_t)h->pcap * sizeof *h->pairs);
    char *buf = malloc(2 * LQ_TOK_MAX_PIECE + 2);
    if (!h->pairs || !buf) {
        free(buf);
        HF_NOMEM();
    }
    for (int64_t i = 0; i < h->pcap; i++)
        h->pairs[i].id = -1;
    int64_t      rank = 0;
    const cJSON *e;
    lq_status    st = LQ_OK;
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *b = NULL;
        int64_t     al = 0, bl = 0;
        if (cJSON_IsString(e)) { /* "a b": exactly one space */
            const char *s  = e->valuestring;
            const char *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = s, al = sp - s, b = sp + 1, bl = (int64_t)strlen(sp + 1);
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a  = cJSON_GetArrayItem(e, 0)->valuestring;
            b  = cJSON_GetArrayItem(e, 1)->valuestring;
            al = (int64_t)strlen(a), bl = (int64_t)strlen(b);
        }
        if (!a || al > LQ_TOK_MAX_PIECE || bl > LQ_TOK_MAX_PIECE)
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: merge %lld is malformed", t->path,
                         (long long)rank);
        int32_t ia = lq_tok_map_get(&h->vocab, a, al), ib = lq_tok_map_get(&h->vocab, b, bl);
        memcpy(buf, a, (size_t)al);
        memcpy(buf + al, b, (size_t)bl);
        int32_t ic = lq_tok_map_get(&h->vocab, buf, al + bl);
        if (ia < 0 || ib < 0 || ic < 0)
            LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT,
                         "%s: merge %lld (\"%.30s\" \"%.30s\") has a token out of the vocab",
                         t->path, (long long)rank, a, b);
        int64_t k   = pslot(h, pkey(ia, ib));
        h->pairs[k] = (pent){pkey(ia, ib), (int32_t)rank, ic};
        rank++;
    }
done:
    free(buf);
    return st;
}

/* The trie of one set, tokens inserted in file order: the first of equal tokens wins. */
static lq_status build_trie(lq_tok_hf *h, int set, const lq_tokenizer *t, lq_err *err) {
    atrie  *tr    = &h->trie[set];
    int64_t bytes = 0;
    for (int64_t i = 0; i < h->nadded; i++)
        if (h->added[i].normalized == set)
            bytes += h->added[i].len;
    if (bytes > INT32_MAX / 2)
        HF_BAD("%s: added tokens hold %lld bytes", t->path, (long long)bytes);
    uint64_t slots = 16;
    while (slots < 2 * (uint64_t)(bytes + 1))
        slots *= 2;
    tr->term  = malloc((size_t)(bytes + 1) * sizeof *tr->term);
    tr->key   = calloc(slots, sizeof *tr->key);
    tr->child = malloc(slots * sizeof *tr->child);
    if (!tr->term || !tr->key || !tr->child)
        HF_NOMEM();
    tr->mask    = slots - 1;
    tr->nn      = 1;
    tr->term[0] = -1;
    for (int64_t i = 0; i < h->nadded; i++) {
        const hadded *a = &h->added[i];
        if (a->normalized != set || a->len == 0)
            continue;
        int32_t node = 0;
        for (int64_t j = 0; j < a->len; j++) {
            const uint64_t key = (((uint64_t)node << 8) | (unsigned char)a->pat[j]) + 1;
            uint64_t       k   = trie_slot(tr, key);
            while (tr->key[k] && tr->key[k] != key)
                k = (k + 1) & tr->mask;
            if (!tr->key[k]) {
                tr->key[k]         = key;
                tr->child[k]       = (int32_t)tr->nn;
                tr->term[tr->nn++] = -1;
            }
            node = tr->child[k];
        }
        if (tr->term[node] < 0)
            tr->term[node] = (int32_t)i;
    }
    return LQ_OK;
}

static lq_status load_added(const cJSON *root, lq_tokenizer *t, lq_err *err) {
    lq_tok_hf   *h     = t->hf;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int64_t      na    = added ? cJSON_GetArraySize(added) : 0;
    h->added           = calloc((size_t)(na ? na : 1), sizeof *h->added);
    if (!h->added)
        HF_NOMEM();
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        hadded     *a  = &h->added[h->nadded];
        const char *c  = jstr(e, "content");
        a->id          = jid(cJSON_GetObjectItemCaseSensitive(e, "id"));
        a->special     = jbool(e, "special", 0);
        a->single_word = jbool(e, "single_word", 0);
        a->lstrip      = jbool(e, "lstrip", 0);
        a->rstrip      = jbool(e, "rstrip", 0);
        a->normalized  = jbool(e, "normalized", !a->special);
        int64_t l      = (int64_t)strlen(c);
        if (!valid_utf8(c, l))
            HF_BAD("%s: added token %d is not valid UTF-8", t->path, a->id);
        if (!t->piece[a->id]) {
            if (!(t->piece[a->id] = lq_strndup(c, l)))
                HF_NOMEM();
            t->plen[a->id] = (int32_t)l;
        }
        if (a->normalized && h->norm) {
            LQ_TRY(normalize(h->norm, c, l, 0, &a->pat, &a->len, err));
        } else {
            a->pat = lq_strndup(c, l);
            a->len = l;
        }
        if (!a->pat)
            HF_NOMEM();
        h->nadded++;
    }
    for (int set = 0; set < 2; set++)
        LQ_TRY(build_trie(h, set, t, err));
    return LQ_OK;
}

static int32_t added_id(const lq_tok_hf *h, const char *content) {
    for (int64_t i = 0; i < h->nadded; i++)
        if (h->added[i].special && !strcmp(h->added[i].pat, content))
            return h->added[i].id;
    return -1;
}

/* BOS from a TemplateProcessing whose single template starts with a special token (possibly
 * inside a Sequence post-processor). */
static int32_t template_bos(const cJSON *pp, int depth) {
    const char *ty = jstr(pp, "type");
    if (!ty || depth > 8)
        return -1;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            int32_t id = template_bos(e, depth + 1);
            if (id >= 0)
                return id;
        }
        return -1;
    }
    if (strcmp(ty, "TemplateProcessing"))
        return -1;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    const cJSON *st    = cJSON_GetObjectItemCaseSensitive(first, "SpecialToken");
    const char  *nm    = st ? jstr(st, "id") : NULL;
    if (!nm)
        return -1;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"), nm);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    return cJSON_GetArraySize(ids) == 1 ? jid(cJSON_GetArrayItem(ids, 0)) : -1;
}

lq_status lq_tok_hf_load(const char *buf, size_t len, lq_tokenizer *t, lq_err *err) {
    cJSON    *root = NULL;
    lq_status st   = lq_json_parse(buf, len, t->path, &root, err);
    if (st != LQ_OK)
        return st; /* LQ_ERR_JSON naming the file, as for every JSON file of the project */
    if (!(t->hf = calloc(1, sizeof *t->hf)))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    lq_tok_hf   *h = t->hf;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(m))
        LQ_FAIL_GOTO(err, LQ_ERR_TOKENIZER_FORMAT, "%s: no \"model\" object", t->path);
    init_bmap(h);
    const cJSON *nj = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (nj && !cJSON_IsNull(nj)) {
        if (!(h->norm = calloc(1, sizeof *h->norm)))
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        LQ_TRY_GOTO(load_norm(nj, h->norm, 0, t, err));
    }
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pj && !cJSON_IsNull(pj)) {
        if (!(h->pre = calloc(1, sizeof *h->pre)))
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        LQ_TRY_GOTO(load_pre(pj, h->pre, 0, t, err));
    }
    LQ_TRY_GOTO(load_model(m, t, err));
    LQ_TRY_GOTO(load_vocab(root, m, t, err));
    LQ_TRY_GOTO(load_merges(m, t, err));
    LQ_TRY_GOTO(load_added(root, t, err));
    const char *unk  = jstr(m, "unk_token");
    h->has_unk_token = unk != NULL;
    h->unk           = unk ? lq_tok_map_get(&h->vocab, unk, (int64_t)strlen(unk)) : -1;
    for (int b = 0; b < 256; b++) {
        char nm[8];
        snprintf(nm, sizeof nm, "<0x%02X>", b);
        h->byte_tok[b] = lq_tok_map_get(&h->vocab, nm, 6);
    }
    /* As for tokenizer.model (lq_tok_spm.c): when no vocab token holds U+2581 after another
     * character and U+2581 itself is a token (never unknown, so no unk run crosses it), words
     * can be merged piecewise between U+2581s. ignore_merges looks up whole words, so it keeps
     * whole words. */
    h->ws_cut = !h->ignore_merges && lq_tok_map_get(&h->vocab, "\xe2\x96\x81", 3) >= 0;
    for (int64_t i = 0; h->ws_cut && i < t->n; i++)
        for (int32_t q = 1; t->piece[i] && q + 3 <= t->plen[i]; q++)
            if (!memcmp(t->piece[i] + q, "\xe2\x96\x81", 3) &&
                (q < 3 || memcmp(t->piece[i] + q - 3, "\xe2\x96\x81", 3))) {
                h->ws_cut = 0;
                break;
            }
    t->kind      = LQ_TOK_HF_JSON;
    int32_t tbos = template_bos(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), 0);
    t->adds_bos  = tbos >= 0;
    t->bos       = tbos;
    static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>"};
    static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>",
                                            "<|im_end|>"};
    for (int k = 0; t->bos < 0 && k < 3; k++)
        t->bos = added_id(h, bos_names[k]);
    for (int k = 0; t->eos < 0 && k < 5; k++)
        t->eos = added_id(h, eos_names[k]);
done:
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding. Text lives in one growable arena; splits refer to it by offset, so the arena may
 * move while splits are produced. The BPE stage starts only once the arena is final, so its
 * word cache can key on arena pointers. */

typedef struct arena {
    char   *b;
    int64_t n, cap;
} arena;

static int ar_reserve(arena *a, int64_t extra) {
    if (a->n + extra <= a->cap)
        return 0;
    int64_t nc = a->cap ? a->cap : 4096;
    while (nc < a->n + extra)
        nc *= 2;
    char *nb = realloc(a->b, (size_t)nc);
    if (!nb)
        return -1;
    a->b   = nb;
    a->cap = nc;
    return 0;
}

/* Append bytes that may themselves live in the arena (hence the offset form). */
static int64_t ar_copy(arena *a, int64_t src_off, int64_t n) {
    if (ar_reserve(a, n) < 0)
        return -1;
    int64_t off = a->n;
    memmove(a->b + off, a->b + src_off, (size_t)n);
    a->n += n;
    return off;
}

static int64_t ar_put(arena *a, const char *s, int64_t n) {
    if (ar_reserve(a, n) < 0)
        return -1;
    int64_t off = a->n;
    memcpy(a->b + off, s, (size_t)n);
    a->n += n;
    return off;
}

typedef struct seg {
    int64_t off, len;
    int32_t id;    /* added token id, -1 for text */
    int32_t first; /* 1: starts the text (Metaspace "first"); 2: starts a continuation part
                      (lq_tok_encode_part's cont: no prefix of any kind); 0: neither */
} seg;

typedef struct segs {
    seg    *v;
    int64_t n, cap;
} segs;

static int segs_push(segs *s, seg x) {
    if (s->n == s->cap) {
        int64_t nc = s->cap ? 2 * s->cap : 64;
        seg    *nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -1;
        s->v   = nv;
        s->cap = nc;
    }
    s->v[s->n++] = x;
    return 0;
}

/* Maximal-subpart length of an ill-formed sequence at s (>= 1), per Unicode 3.9 / Rust. */
static int64_t bad_len(const unsigned char *s, int64_t n) {
    unsigned c = s[0];
    int      need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0)
            lo = 0xa0;
        if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0)
            lo = 0x90;
        if (c == 0xf4)
            hi = 0x8f;
    } else
        return 1;
    int64_t k = 1;
    for (int i = 0; i < need && k < n; i++, k++) {
        if (s[k] < lo || s[k] > hi)
            break;
        lo = 0x80, hi = 0xbf;
    }
    return k;
}

static int64_t put_lossy(arena *a, const char *s, int64_t n) {
    if (ar_reserve(a, 3 * n + 1) < 0)
        return -1;
    int64_t off = a->n;
    for (int64_t i = 0; i < n;) {
        uint32_t cp;
        int      k = lq_tok_utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (k) {
            memcpy(a->b + a->n, s + i, (size_t)k);
            a->n += k;
            i += k;
        } else {
            memcpy(a->b + a->n, "\xef\xbf\xbd", 3);
            a->n += 3;
            i += bad_len((const unsigned char *)s + i, n - i);
        }
    }
    return off;
}

static int is_ws(uint32_t c) { /* Unicode White_Space (Rust char::is_whitespace) */
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static int is_word(uint32_t c) { /* Rust regex \w */
    if (c == '_' || c == 0x200c || c == 0x200d)
        return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

/* Code point ending at s[n) (valid UTF-8). */
static uint32_t last_cp(const char *s, int64_t n, int64_t *start) {
    int64_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
        i--;
    uint32_t cp = 0;
    lq_tok_utf8_dec((const unsigned char *)s + i, n - i, &cp);
    if (start)
        *start = i;
    return cp;
}

/* cont: s opens a continuation part (lq_tok_encode_part): no Prepend. */
static lq_status normalize(const hnorm *nm, const char *s, int64_t n, int cont, char **out,
                           int64_t *on, lq_err *err) {
    char   *cur = lq_strndup(s, n);
    int64_t cn  = n;
    if (!cur)
        return lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    const hnorm *list = nm->type == N_SEQ ? nm->sub : nm;
    int64_t      cnt  = nm->type == N_SEQ ? nm->nsub : 1;
    for (int64_t k = 0; k < cnt; k++) {
        const hnorm *q  = &list[k];
        char        *nx = NULL;
        int64_t      nn = 0;
        if (q->type == N_SEQ) {
            lq_status st = normalize(q, cur, cn, cont, &nx, &nn, err);
            if (st != LQ_OK) {
                free(cur);
                return st;
            }
        } else if (q->type == N_PREPEND) {
            if (cn == 0 || cont)
                continue;
            nx = malloc((size_t)(cn + q->alen + 1));
            if (nx) {
                memcpy(nx, q->a, (size_t)q->alen);
                memcpy(nx + q->alen, cur, (size_t)cn);
                nn = cn + q->alen;
            }
        } else if (q->type == N_REPLACE) {
            int64_t hits = 0;
            for (int64_t i = 0; i + q->alen <= cn;)
                if (!memcmp(cur + i, q->a, (size_t)q->alen))
                    hits++, i += q->alen;
                else
                    i++;
            nx = malloc((size_t)(cn + hits * q->blen + 1));
            if (nx)
                for (int64_t i = 0; i < cn;) {
                    if (i + q->alen <= cn && !memcmp(cur + i, q->a, (size_t)q->alen)) {
                        memcpy(nx + nn, q->b, (size_t)q->blen);
                        nn += q->blen;
                        i += q->alen;
                    } else {
                        nx[nn++] = cur[i++];
                    }
                }
        } else if (q->type >= N_NFC && q->type <= N_NFKD) {
            static const int  opt[4] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE,
                                        UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                        UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
            utf8proc_uint8_t *r      = NULL;
            utf8proc_ssize_t  rl =
                utf8proc_map((const utf8proc_uint8_t *)cur, cn, &r,
                             (utf8proc_option_t)(UTF8PROC_STABLE | opt[q->type - N_NFC]));
            if (rl < 0) {
                free(cur);
                return lq_fail(err,
                               rl == UTF8PROC_ERROR_NOMEM ? LQ_ERR_NOMEM : LQ_ERR_TOKENIZER_FORMAT,
                               "tokenizer: unicode normalization failed: %s", utf8proc_errmsg(rl));
            }
            nx = (char *)r;
            nn = rl;
        } else if (q->type == N_LOWER) {
            nx = malloc((size_t)(4 * cn + 1));
            if (nx)
                for (int64_t i = 0; i < cn;) {
                    uint32_t cp;
                    int      l = lq_tok_utf8_dec((const unsigned char *)cur + i, cn - i, &cp);
                    if (!l)
                        l = 1, cp = 0xfffd;
                    nn +=
                        lq_tok_utf8_enc((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), nx + nn);
                    i += l;
                }
        } else { /* N_STRIP */
            int64_t  a = 0, b = cn;
            uint32_t cp;
            int      l;
            while (q->left && a < b &&
                   (l = lq_tok_utf8_dec((const unsigned char *)cur + a, b - a, &cp)) && is_ws(cp))
                a += l;
            int64_t st0;
            while (q->right && b > a && is_ws(last_cp(cur + a, b - a, &st0)))
                b = a + st0;
            nx = lq_strndup(cur + a, b - a);
            nn = b - a;
        }
        free(cur);
        if (!nx)
            return lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        cur = nx;
        cn  = nn;
    }
    *out = cur;
    *on  = cn;
    return LQ_OK;
}

/* Split text seg x on the added tokens of one set (find_matches in added_vocabulary.rs):
 * leftmost-longest matches, special tokens skipped but still consuming their span,
 * single_word / lstrip / rstrip honoured. */
static int added_split(const lq_tok_hf *h, int set, const arena *a, seg x, segs *out) {
    const char *s = a->b + x.off;
    int64_t     n = x.len, start_off = 0;
    for (int64_t i = 0; i < n;) {
        int64_t bl = 0, bi = -1;
        int32_t node = 0;
        for (int64_t j = i; j < n; j++) { /* the longest token starting at i */
            if ((node = trie_child(&h->trie[set], node, (unsigned char)s[j])) < 0)
                break;
            if (h->trie[set].term[node] >= 0)
                bl = j - i + 1, bi = h->trie[set].term[node];
        }
        if (bi < 0) {
            i++;
            continue;
        }
        const hadded *t  = &h->added[bi];
        int64_t       ms = i, me = i + bl;
        i = me;
        if (t->special)
            continue;
        if (t->single_word) {
            uint32_t cp;
            int      before = ms > 0 && is_word(last_cp(s, ms, NULL));
            int after = me < n && lq_tok_utf8_dec((const unsigned char *)s + me, n - me, &cp) &&
                        is_word(cp);
            if (before || after)
                continue;
        }
        if (t->lstrip) {
            int64_t p = ms, st0;
            while (p > 0 && is_ws(last_cp(s, p, &st0)))
                p = st0;
            ms = p > start_off ? p : start_off;
        }
        if (t->rstrip) {
            uint32_t cp;
            int      l;
            while (me < n && (l = lq_tok_utf8_dec((const unsigned char *)s + me, n - me, &cp)) &&
                   is_ws(cp))
                me += l;
        }
        if (start_off < ms && segs_push(out, (seg){x.off + start_off, ms - start_off, -1,
                                                   start_off == 0 ? x.first : 0}) < 0)
            return -1;
        if (segs_push(out, (seg){x.off + ms, me - ms, t->id, 0}) < 0)
            return -1;
        start_off = me;
    }
    if (start_off < n && segs_push(out, (seg){x.off + start_off, n - start_off, -1,
                                              start_off == 0 ? x.first : 0}) < 0)
        return -1;
    return 0;
}

/* All matches of re in the seg, then the split behavior (normalizer.rs split()). */
typedef struct mrange {
    int64_t s, e;
    int     m;
} mrange;

/* Iterator over a regex split of s[0..len): the unmatched gaps and the matches, in order, as
 * (start, end, matched) ranges. Matching always sees the whole subject, so a split produced in
 * several calls is the one produced in one. */
typedef struct rx_iter {
    int64_t off, prev;
    int     done;
} rx_iter;

/* Append the next ranges to (*mr)[*nm..] until at least `max` are there (stopping after a
 * match) or the subject is exhausted (it->done). */
static lq_status rx_next(const lq_tokenizer *t, pcre2_code *re, pcre2_match_data *md, const char *s,
                         int64_t len, rx_iter *it, int64_t max, mrange **mr, int64_t *mcap,
                         int64_t *nm, lq_err *err) {
#define MPUSH(S, E, M)                                                                             \
    do {                                                                                           \
        if (*nm == *mcap) {                                                                        \
            int64_t nc = *mcap ? 2 * *mcap : 64;                                                   \
            mrange *nv = realloc(*mr, (size_t)nc * sizeof *nv);                                    \
            if (!nv)                                                                               \
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);                   \
            *mr   = nv;                                                                            \
            *mcap = nc;                                                                            \
        }                                                                                          \
        (*mr)[(*nm)++] = (mrange){(S), (E), (M)};                                                  \
    } while (0)
    while (!it->done && *nm < max) {
        if (it->off > len) {
            it->done = 1;
            break;
        }
        int rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)len, (PCRE2_SIZE)it->off,
                             PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->done = 1;
            break;
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: regex match failed: %s", t->path,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int64_t     ms = (int64_t)ov[0], me = (int64_t)ov[1];
        if (it->prev < ms)
            MPUSH(it->prev, ms, 0);
        MPUSH(ms, me, 1);
        it->prev = me;
        if (me > ms) {
            it->off = me;
        } else { /* empty match: step one character */
            if (ms >= len) {
                it->done = 1;
                break;
            }
            it->off = ms + 1;
            while (it->off < len && ((unsigned char)s[it->off] & 0xc0) == 0x80)
                it->off++;
        }
    }
    if (it->done && it->prev < len) {
        MPUSH(it->prev, len, 0);
        it->prev = len;
    }
#undef MPUSH
    return LQ_OK;
}

/* Fold ranges m[0..nm) by the Split behavior into output segments of x (offsets relative to
 * x). Isolated and Removed fold each range alone, so they can be folded batch by batch. */
static lq_status fold_ranges(const lq_tokenizer *t, mrange *m, int64_t nm, int behavior, int invert,
                             seg x, segs *out, lq_err *err) {
    if (invert)
        for (int64_t i = 0; i < nm; i++)
            m[i].m = !m[i].m;
    /* Fold into output ranges (flag m now = "remove"). */
    int64_t k = 0;
    if (behavior == B_ISOLATED || behavior == B_REMOVED) {
        for (int64_t i = 0; i < nm; i++)
            m[k++] = (mrange){m[i].s, m[i].e, behavior == B_REMOVED && m[i].m};
    } else if (behavior == B_CONTIG || behavior == B_PREV) {
        int pm = 0;
        for (int64_t i = 0; i < nm; i++) {
            int merge = behavior == B_CONTIG ? (m[i].m == pm) : (m[i].m && !pm);
            if (merge && k > 0)
                m[k - 1].e = m[i].e;
            else
                m[k++] = (mrange){m[i].s, m[i].e, 0};
            pm = m[i].m;
        }
    } else { /* B_NEXT: the same fold from the right */
        int     pm = 0;
        int64_t w  = nm;
        for (int64_t i = nm - 1; i >= 0; i--) {
            int merge = m[i].m && !pm;
            pm        = m[i].m;
            if (merge && w < nm)
                m[w].s = m[i].s;
            else
                m[--w] = (mrange){m[i].s, m[i].e, 0};
        }
        for (int64_t i = w; i < nm; i++)
            m[k++] = m[i];
    }
    for (int64_t i = 0; i < k; i++)
        if (!m[i].m && m[i].e > m[i].s &&
            segs_push(out, (seg){x.off + m[i].s, m[i].e - m[i].s, -1, m[i].s == 0 ? x.first : 0}) <
                0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    return LQ_OK;
}

static lq_status regex_split(const lq_tokenizer *t, pcre2_code *re, int behavior, int invert,
                             pcre2_match_data *md, arena *a, seg x, segs *out, mrange **mr,
                             int64_t *mcap, lq_err *err) {
    rx_iter it = {0, 0, 0};
    int64_t nm = 0;
    LQ_TRY(rx_next(t, re, md, a->b + x.off, x.len, &it, INT64_MAX, mr, mcap, &nm, err));
    return fold_ranges(t, *mr, nm, behavior, invert, x, out, err);
}

typedef struct pstate {
    pcre2_match_data *md;
    mrange           *mr;
    int64_t           mcap;
} pstate;

/* GPT-2 byte-to-character mapping of segments v[from..n) into new arena text. */
static lq_status bytelevel_map(const lq_tokenizer *t, arena *a, segs *v, int64_t from,
                               lq_err *err) {
    const lq_tok_hf *h = t->hf;
    for (int64_t k = from; k < v->n; k++) {
        seg *y = &v->v[k];
        if (ar_reserve(a, 2 * y->len) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        int64_t off = a->n;
        for (int64_t q = 0; q < y->len; q++) {
            unsigned char b = (unsigned char)a->b[y->off + q];
            memcpy(a->b + a->n, h->bmap[b], h->bmap_len[b]);
            a->n += h->bmap_len[b];
        }
        y->len = a->n - off;
        y->off = off;
    }
    return LQ_OK;
}

/* Apply pre-tokenizer p to the segments in (results back in in), leaving out its first leaf
 * when skip_first (the caller applied it). */
static lq_status pre_apply_ex(const lq_tokenizer *t, const hpre *p, int skip_first, arena *a,
                              segs *in, segs *tmp, pstate *ps, lq_err *err) {
    const lq_tok_hf *h = t->hf;
    if (p->type == P_SEQ) {
        for (int64_t k = 0; k < p->nsub; k++)
            LQ_TRY(pre_apply_ex(t, &p->sub[k], skip_first && k == 0, a, in, tmp, ps, err));
        return LQ_OK;
    }
    if (skip_first)
        return LQ_OK;
    tmp->n = 0;
    for (int64_t i = 0; i < in->n; i++) {
        seg x = in->v[i];
        if (x.id >= 0) {
            if (segs_push(tmp, x) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            continue;
        }
        if (p->type == P_METASPACE) {
            int64_t nsp = 0;
            for (int64_t k = 0; k < x.len; k++)
                nsp += a->b[x.off + k] == ' ';
            if (ar_reserve(a, x.len + nsp * p->rep_len + p->rep_len) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            int64_t off = a->n;
            for (int64_t k = 0; k < x.len; k++) {
                char c = a->b[x.off + k];
                if (c == ' ')
                    memcpy(a->b + a->n, p->rep, (size_t)p->rep_len), a->n += p->rep_len;
                else
                    a->b[a->n++] = c;
            }
            seg y      = {off, a->n - off, -1, x.first};
            int starts = y.len >= p->rep_len && !memcmp(a->b + off, p->rep, (size_t)p->rep_len);
            if (!starts && x.first != 2 && (p->prepend == 2 || (p->prepend == 1 && x.first == 1))) {
                int64_t o2 = ar_put(a, p->rep, p->rep_len);
                if (o2 < 0 || ar_copy(a, off, y.len) < 0)
                    return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
                y.off = o2;
                y.len += p->rep_len;
            }
            if (p->split)
                LQ_TRY(
                    regex_split(t, p->re, B_NEXT, 0, ps->md, a, y, tmp, &ps->mr, &ps->mcap, err));
            else if (y.len > 0 && segs_push(tmp, y) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        } else if (p->type == P_SPLIT) {
            LQ_TRY(regex_split(t, p->re, p->behavior, p->invert, ps->md, a, x, tmp, &ps->mr,
                               &ps->mcap, err));
        } else { /* P_BYTELEVEL */
            if (p->add_prefix_space && x.first != 2 && (x.len == 0 || a->b[x.off] != ' ')) {
                int64_t o2 = ar_put(a, " ", 1);
                if (o2 < 0 || ar_copy(a, x.off, x.len) < 0)
                    return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
                x.off = o2;
                x.len += 1;
            }
            int64_t from = tmp->n;
            if (p->use_regex)
                LQ_TRY(regex_split(t, h->gpt2, B_ISOLATED, 0, ps->md, a, x, tmp, &ps->mr, &ps->mcap,
                                   err));
            else if (x.len > 0 && segs_push(tmp, x) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            LQ_TRY(bytelevel_map(t, a, tmp, from, err));
        }
    }
    segs sw = *in;
    *in     = *tmp;
    *tmp    = sw;
    return LQ_OK;
}

/* BPE on one word (bpe/model.rs merge_word + word.rs merge_all). */
typedef struct bsym {
    int32_t id, len;
    int64_t prev, next;
} bsym;

typedef struct bpe_ws {
    bsym       *s;
    int64_t     cap;
    lq_tok_heap h;
} bpe_ws;

static lq_status bpe_word(const lq_tokenizer *t, const char *w, int64_t n, bpe_ws *ws,
                          lq_tok_ids *out, lq_err *err) {
    const lq_tok_hf *h = t->hf;
    if (h->ignore_merges) {
        int32_t id = lq_tok_map_get(&h->vocab, w, n);
        if (id >= 0)
            return lq_tok_ids_push(out, id) < 0 ? lq_fail(err, LQ_ERR_NOMEM, "out of memory")
                                                : LQ_OK;
    }
    if (ws->cap < n + 1) {
        bsym *ns = realloc(ws->s, (size_t)(n + 1) * sizeof *ns);
        if (!ns)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        ws->s   = ns;
        ws->cap = n + 1;
    }
    bsym   *s       = ws->s;
    int64_t ns      = 0;
    int32_t unk_len = -1;
#define ADD(ID, LEN) (s[ns] = (bsym){(ID), (LEN), ns - 1, -1}, ns++)
    for (int64_t i = 0; i < n;) {
        static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        int64_t              l         = k_len[(unsigned char)w[i] >> 4];
        if (l > n - i)
            l = n - i;
        int32_t id = lq_tok_map_get(&h->vocab, w + i, l);
        if (id >= 0) {
            if (unk_len >= 0)
                ADD(h->unk, unk_len), unk_len = -1;
            ADD(id, (int32_t)l);
        } else {
            int all = h->byte_fallback;
            for (int64_t k = 0; all && k < l; k++)
                all = h->byte_tok[(unsigned char)w[i + k]] >= 0;
            if (all) { /* as in tokenizers, a pending unk is not flushed first */
                for (int64_t k = 0; k < l; k++)
                    ADD(h->byte_tok[(unsigned char)w[i + k]], 1);
            } else if (!h->has_unk_token) {
                /* tokenizers silently drops the character; losing text unnoticed is worse
                 * than refusing it */
                return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT,
                               "%s: character \"%.*s\" is not in the vocab and there is no "
                               "unk_token",
                               t->path, (int)l, w + i);
            } else {
                if (h->unk < 0)
                    return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT,
                                   "%s: unk_token is not in the vocab", t->path);
                if (unk_len >= 0 && h->fuse_unk)
                    unk_len += (int32_t)l;
                else {
                    if (unk_len >= 0)
                        ADD(h->unk, unk_len);
                    unk_len = (int32_t)l;
                }
            }
        }
        i += l;
    }
    if (unk_len >= 0)
        ADD(h->unk, unk_len);
#undef ADD
    for (int64_t i = 0; i + 1 < ns; i++)
        s[i].next = i + 1;
    ws->h.n = 0;
    for (int64_t i = 0; i + 1 < ns; i++) {
        const pent *p = pair_get(h, s[i].id, s[i + 1].id);
        if (p && lq_tok_heap_push(&ws->h, (lq_tok_cand){p->rank, i, 0, p->id}) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    }
    while (ws->h.n > 0) {
        lq_tok_cand c = lq_tok_heap_pop(&ws->h);
        int64_t     i = c.pos, j = s[i].next;
        if (s[i].len == 0 || j < 0)
            continue;
        const pent *p = pair_get(h, s[i].id, s[j].id);
        if (!p || p->id != c.id)
            continue;
        s[i].id = c.id;
        s[i].len += s[j].len;
        s[j].len  = 0;
        s[i].next = s[j].next;
        if (s[j].next >= 0)
            s[s[j].next].prev = i;
        if (s[i].prev >= 0 && (p = pair_get(h, s[s[i].prev].id, s[i].id)) &&
            lq_tok_heap_push(&ws->h, (lq_tok_cand){p->rank, s[i].prev, 0, p->id}) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        if (s[i].next >= 0 && (p = pair_get(h, s[i].id, s[s[i].next].id)) &&
            lq_tok_heap_push(&ws->h, (lq_tok_cand){p->rank, i, 0, p->id}) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    }
    for (int64_t i = 0; i < ns; i++)
        if (s[i].len > 0 && lq_tok_ids_push(out, s[i].id) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    return LQ_OK;
}

/* Word -> ids through a per-call cache (keys point into the final arena). */
typedef struct wcache {
    lq_tok_map  map;
    lq_tok_ids  pool; /* cached id runs */
    int64_t    *runs, nruns, cap;
    const char *base; /* the arena the keys point into (NULL: map not initialized) */
} wcache;

static lq_status model_word(const lq_tokenizer *t, const char *w, int64_t n, bpe_ws *ws, wcache *c,
                            lq_tok_ids *out, lq_err *err) {
    int32_t r = n <= 256 ? lq_tok_map_get(&c->map, w, n) : -1;
    if (r >= 0) {
        for (int64_t k = c->runs[2 * r]; k < c->runs[2 * r] + c->runs[2 * r + 1]; k++)
            if (lq_tok_ids_push(out, c->pool.v[k]) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        return LQ_OK;
    }
    int64_t from = out->n;
    LQ_TRY(bpe_word(t, w, n, ws, out, err));
    if (n > 256 || c->nruns >= INT32_MAX)
        return LQ_OK;
    if (c->nruns == c->cap) {
        int64_t  nc = c->cap ? 2 * c->cap : 256;
        int64_t *nv = realloc(c->runs, (size_t)(2 * nc) * sizeof *nv);
        if (!nv)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        c->runs = nv;
        c->cap  = nc;
    }
    c->runs[2 * c->nruns]     = c->pool.n;
    c->runs[2 * c->nruns + 1] = out->n - from;
    for (int64_t k = from; k < out->n; k++)
        if (lq_tok_ids_push(&c->pool, out->v[k]) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    if (lq_tok_map_put(&c->map, w, (int32_t)n, (int32_t)c->nruns) < 0)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    c->nruns++;
    return LQ_OK;
}

/* Bytes per call of a character-local normalizer. */
#ifndef NORM_PART
#define NORM_PART ((int64_t)1 << 20)
#endif

/* Whether the normalizer acts character by character (Unicode forms, Lowercase, Replace of a
 * single character), so that normalizing a text in parts cut before ASCII characters gives the
 * same bytes as normalizing it whole. Prepend and Strip act on the ends of a split: no. */
static int norm_local(const hnorm *n) {
    if (n->type == N_SEQ) {
        for (int64_t k = 0; k < n->nsub; k++)
            if (!norm_local(&n->sub[k]))
                return 0;
        return 1;
    }
    if (n->type == N_REPLACE) {
        uint32_t cp;
        return n->alen > 0 && lq_tok_utf8_dec((const unsigned char *)n->a, n->alen, &cp) == n->alen;
    }
    return n->type >= N_NFC && n->type <= N_LOWER;
}

/* Pieces per batch of the incremental pre-tokenization (about 4 bytes of text each). */
#ifndef ENC_BATCH
#define ENC_BATCH ((int64_t)1 << 18)
#endif

static void cache_clear(wcache *c) {
    lq_tok_map_free(&c->map);
    memset(&c->map, 0, sizeof c->map);
    c->pool.n = 0;
    c->nruns  = 0;
    c->base   = NULL;
}

/* The model over the pre-tokenized words of v. The cache keys point into the arena: when the
 * arena has moved since they were made, the cache starts over. */
static lq_status encode_words(const lq_tokenizer *t, const arena *a, const segs *v, bpe_ws *ws,
                              wcache *cache, lq_tok_ids *out, lq_err *err) {
    const lq_tok_hf *h = t->hf;
    if (cache->base != a->b) {
        cache_clear(cache);
        if (lq_tok_map_init(&cache->map, 1024) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        cache->base = a->b;
    }
    for (int64_t i = 0; i < v->n; i++) {
        seg x = v->v[i];
        if (x.id >= 0) {
            if (lq_tok_ids_push(out, x.id) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            continue;
        }
        if (x.len == 0)
            continue;
        const char *w = a->b + x.off;
        if (!h->ws_cut) {
            LQ_TRY(model_word(t, w, x.len, ws, cache, out, err));
            continue;
        }
        /* see ws_cut: words split before each U+2581 that follows another character */
        for (int64_t b = 0; b < x.len;) {
            int64_t e = b + 1;
            while (e < x.len && !(e >= 3 && e + 3 <= x.len && !memcmp(w + e, "\xe2\x96\x81", 3) &&
                                  memcmp(w + e - 3, "\xe2\x96\x81", 3)))
                e++;
            LQ_TRY(model_word(t, w + b, e - b, ws, cache, out, err));
            b = e;
        }
    }
    return LQ_OK;
}

lq_status lq_tok_hf_encode(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                           lq_tok_ids *out, lq_err *err) {
    const lq_tok_hf *h  = t->hf;
    lq_status        st = LQ_OK;
    arena            a  = {0};
    segs             s1 = {0}, s2 = {0}, tmp = {0};
    pstate           ps    = {0};
    bpe_ws           ws    = {0};
    wcache           cache = {0};
    if (put_lossy(&a, text, len) < 0 || !(ps.md = pcre2_match_data_create(1, NULL)))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    if (a.n == 0)
        goto done;
    if (added_split(h, 0, &a, (seg){0, a.n, -1, cont ? 2 : 1}, &s1) < 0)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    for (int64_t i = 0; i < s1.n; i++) {
        seg x = s1.v[i];
        if (x.id >= 0 || !h->norm) {
            if (segs_push(&s2, x) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            if (x.id >= 0)
                continue;
        } else {
            /* character-local normalizers go NORM_PART bytes at a time, cut before an ASCII
             * character (no composition or reordering crosses one), into one contiguous
             * normalized segment; the others see the segment whole */
            const int64_t part = norm_local(h->norm) ? NORM_PART : x.len;
            const int64_t off0 = a.n;
            for (int64_t p0 = 0; p0 < x.len || p0 == 0;) {
                int64_t p1 = p0 + part < x.len ? p0 + part : x.len;
                while (p1 < x.len && (unsigned char)a.b[x.off + p1] >= 0x80)
                    p1++;
                char   *nb = NULL;
                int64_t nn = 0;
                char   *cp = lq_strndup(a.b + x.off + p0, p1 - p0);
                if (!cp)
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
                st = normalize(h->norm, cp, p1 - p0, p0 == 0 && x.first == 2, &nb, &nn, err);
                free(cp);
                if (st != LQ_OK)
                    goto done;
                int64_t off = ar_put(&a, nb, nn);
                free(nb);
                if (off < 0)
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
                if (p1 >= x.len)
                    break;
                p0 = p1;
            }
            if (segs_push(&s2, (seg){off0, a.n - off0, -1, x.first}) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        }
    }
    /* normalized added tokens, over the normalized text splits */
    s1.n = 0;
    for (int64_t i = 0; i < s2.n; i++) {
        int rc = s2.v[i].id >= 0 ? segs_push(&s1, s2.v[i]) : added_split(h, 1, &a, s2.v[i], &s1);
        if (rc < 0)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    }
    /* Pre-tokenize and encode each text segment. When the first pre-tokenizer step is a regex
     * whose pieces stand alone (Isolated / Removed, ByteLevel's), its matches over the whole
     * segment are taken ENC_BATCH at a time and each batch runs through the remaining steps and
     * the model before the next, the arena cut back after it: the same pieces as one pass (the
     * regex always sees the whole subject), with a working set of one batch instead of several
     * times the text. */
    const hpre *lead = h->pre;
    while (lead && lead->type == P_SEQ)
        lead = lead->nsub > 0 ? &lead->sub[0] : NULL;
    const int inc =
        lead &&
        ((lead->type == P_SPLIT && (lead->behavior == B_ISOLATED || lead->behavior == B_REMOVED)) ||
         (lead->type == P_BYTELEVEL && lead->use_regex));
    for (int64_t i = 0; i < s1.n; i++) {
        seg x = s1.v[i];
        if (x.id >= 0) {
            if (lq_tok_ids_push(out, x.id) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            continue;
        }
        if (!inc) {
            s2.n = 0;
            if (segs_push(&s2, x) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            if (h->pre)
                LQ_TRY_GOTO(pre_apply_ex(t, h->pre, 0, &a, &s2, &tmp, &ps, err));
            LQ_TRY_GOTO(encode_words(t, &a, &s2, &ws, &cache, out, err));
            continue;
        }
        const int bl = lead->type == P_BYTELEVEL;
        if (bl && lead->add_prefix_space && x.first != 2 && (x.len == 0 || a.b[x.off] != ' ')) {
            int64_t o2 = ar_put(&a, " ", 1);
            if (o2 < 0 || ar_copy(&a, x.off, x.len) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            x.off = o2;
            x.len += 1;
        }
        const int64_t mark = a.n;
        rx_iter       it   = {0, 0, 0};
        while (!it.done) {
            int64_t nm = 0;
            LQ_TRY_GOTO(rx_next(t, bl ? h->gpt2 : lead->re, ps.md, a.b + x.off, x.len, &it,
                                ENC_BATCH, &ps.mr, &ps.mcap, &nm, err));
            s2.n = 0;
            LQ_TRY_GOTO(fold_ranges(t, ps.mr, nm, bl ? B_ISOLATED : lead->behavior,
                                    bl ? 0 : lead->invert, x, &s2, err));
            if (bl)
                LQ_TRY_GOTO(bytelevel_map(t, &a, &s2, 0, err));
            LQ_TRY_GOTO(pre_apply_ex(t, h->pre, 1, &a, &s2, &tmp, &ps, err));
            LQ_TRY_GOTO(encode_words(t, &a, &s2, &ws, &cache, out, err));
            a.n = mark; /* the batch's copies are done with; cached words pointed into them */
            cache_clear(&cache);
        }
    }
done:
    free(a.b);
    free(s1.v);
    free(s2.v);
    free(tmp.v);
    pcre2_match_data_free(ps.md);
    free(ps.mr);
    free(ws.s);
    free(ws.h.v);
    lq_tok_map_free(&cache.map);
    free(cache.pool.v);
    free(cache.runs);
    return st;
}
