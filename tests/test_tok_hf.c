/* HF tokenizer.json (BPE) against the `tokenizers` library's own ids
 * (tests/data/tok/gen_vectors.py): the Llama-2 tokenizer.json (byte fallback, Prepend+Replace
 * normalizer, <s> template), a Llama-3 style byte-level BPE (NFC, Split regex, ByteLevel,
 * ignore_merges, BOS template) and a GPT-2 style one (ByteLevel with its regex and a prefix
 * space, no BOS): 375+ strings each id for id and the WikiText-2 test join by count + hash;
 * malformed and unsupported files rejected with their codes. */
#include "lq_dataset.h"
#include "lq_test_tok.h"

static lq_tokenizer *load(const char *data, const char *name) {
    char          p[4096];
    lq_err        err = {0};
    lq_tokenizer *t   = NULL;
    snprintf(p, sizeof p, "%s/tok/%s", data, name);
    size_t l = strlen(p);
    if (l > 4 && !strcmp(p + l - 4, ".zst")) {
        lq_text txt = {0};
        CHECK_OK(lq_text_read_file(p, 1 << 28, &txt, &err));
        if (txt.data)
            CHECK_OK(lq_tok_load_memory(txt.data, (size_t)txt.len, LQ_TOK_HF_JSON, p, &t, &err));
        lq_text_free(&txt);
    } else {
        CHECK_OK(lq_tok_load_file(p, &t, &err));
    }
    if (!t)
        fprintf(stderr, "%s: %s\n", p, err.msg);
    return t;
}

/* Text made to put the awkward places next to newlines (blank lines before a letter, "\r\n",
 * runs of spaces and tabs, digits, punctuation, non-ASCII): streamed with small parts it must
 * give the whole-text ids, refusing the cuts that would change them (GPT-2's "\s+(?!\S)"
 * keeps all but the last of a run of newlines together: a cut after "\n\n" splits it).
 * Returns the cuts refused. */
static int64_t stream_tricky(const lq_tokenizer *t, const char *label) {
    static const char *frag[] = {
        "The cat sat.",
        "\n",
        "\n\n",
        " \n \n ",
        "\r\n",
        "word",
        "  ",
        "\t",
        "12345",
        "3.14",
        "don't",
        " ",
        "\n\n\nAnd",
        "Ünïcödé",
        "日本語",
        "\xF0\x9F\x98\x80",
        "= = Head = =",
        "\n   x",
        "                                                                        ",
        "--",
    };
    const int nf  = (int)(sizeof frag / sizeof *frag);
    char     *txt = malloc(1 << 18);
    int64_t   len = 0;
    uint64_t  x   = 0x9E3779B97F4A7C15ull;
    while (len < (1 << 18) - 128) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *f = frag[x % (uint64_t)nf];
        memcpy(txt + len, f, strlen(f));
        len += (int64_t)strlen(f);
    }
    int32_t *ids = NULL;
    int64_t  n   = 0;
    lq_err   err = {0};
    CHECK_OK(lq_tok_encode(t, txt, len, 0, &ids, &n, &err));
    int64_t rej = 0;
    for (int64_t part = 300; part <= 3000; part *= 10) {
        rej += test_stream_same(t, txt, len, 0, part, 97, ids, n, label);
        rej += test_stream_same(t, txt, len, 0, part, len, ids, n, label); /* one push */
    }
    free(ids);
    free(txt);
    return rej;
}

static void run(const char *shared, const char *data, const char *file, const char *name,
                int64_t vocab, int32_t bos) {
    lq_tokenizer *t = load(data, file);
    if (!t)
        return;
    CHECK_EQ_INT(lq_tok_get_kind(t), LQ_TOK_HF_JSON);
    CHECK_EQ_INT(lq_tok_vocab_size(t), vocab);
    CHECK_EQ_INT(lq_tok_bos_id(t), bos);
    CHECK_EQ_INT(lq_tok_adds_bos(t), bos >= 0);
    char vec[4096], ref[4096];
    snprintf(vec, sizeof vec, "%s/tok/%s.jsonl", data, name);
    snprintf(ref, sizeof ref, "%s/tok/%s_wikitext2.json", data, name);
    test_vectors(t, vec, "tokenizers");
    test_wikitext(t, shared, ref, "tokenizers");
    const int64_t rej = stream_tricky(t, file);
    CHECK_MSG(strcmp(name, "bl_gpt2") || rej > 0,
              "%s: no cut refused on the awkward text: the check sees nothing", file);
    int32_t *ids = NULL;
    int64_t  n   = 0;
    lq_err   err = {0};
    CHECK_OK(lq_tok_encode(t, "", 0, 1, &ids, &n, &err));
    CHECK_EQ_INT(n, bos >= 0 ? 1 : 0);
    free(ids);
    lq_tok_free(t);
}

static void rejects(void) {
    lq_tokenizer *t        = NULL;
    lq_err        err      = {0};
    const char   *bad_json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}";
    CHECK_EQ_INT(
        lq_tok_load_memory(bad_json, strlen(bad_json), LQ_TOK_HF_JSON, "cut.json", &t, &err),
        LQ_ERR_JSON);
    CHECK(strstr(err.msg, "cut.json") != NULL);
    const char *uni = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}";
    CHECK_EQ_INT(lq_tok_load_memory(uni, strlen(uni), LQ_TOK_HF_JSON, "uni.json", &t, &err),
                 LQ_ERR_TOKENIZER_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "Unigram") != NULL, "%s", err.msg);
    const char *wp = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                     "\"merges\": [\"a c\"]}}";
    CHECK_EQ_INT(lq_tok_load_memory(wp, strlen(wp), LQ_TOK_HF_JSON, "merge.json", &t, &err),
                 LQ_ERR_TOKENIZER_FORMAT);
    const char *pre = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                      "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}}";
    CHECK_EQ_INT(lq_tok_load_memory(pre, strlen(pre), LQ_TOK_HF_JSON, "bert.json", &t, &err),
                 LQ_ERR_TOKENIZER_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "BertPreTokenizer") != NULL, "%s", err.msg);
    /* a 3-token BPE without unk: an unknown character is an error naming it, not a crash */
    const char *tiny =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
        "\"merges\": [\"a b\"]}}";
    CHECK_OK(lq_tok_load_memory(tiny, strlen(tiny), LQ_TOK_HF_JSON, "tiny.json", &t, &err));
    if (t) {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        CHECK_OK(lq_tok_encode(t, "abab", 4, 1, &ids, &n, &err));
        CHECK(n == 2 && ids[0] == 2 && ids[1] == 2); /* "ab"+"ab" is no merge */
        free(ids);
        CHECK_EQ_INT(lq_tok_encode(t, "abc", 3, 0, &ids, &n, &err), LQ_ERR_TOKENIZER_FORMAT);
        lq_tok_free(t);
    }
}

int main(void) {
    const char *shared = lq_test_env_or_skip("LQ_SHARED");
    const char *data   = lq_test_env_or_skip("LQ_TEST_DATA");
    run(shared, data, "llama2_legacy.json.zst", "llama2_legacy", 32000, 1);
    run(shared, data, "bl_llama3.json", "bl_llama3", 1200, 0);
    run(shared, data, "bl_gpt2.json", "bl_gpt2", 1200, -1);
    rejects();
    return lq_test_end("tok_hf");
}
