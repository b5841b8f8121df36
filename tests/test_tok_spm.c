/* SentencePiece tokenizer.model (Llama-2) against sentencepiece's own ids
 * (tests/data/tok/gen_vectors.py): 336 strings id for id (WikiText-2 lines and edge cases:
 * whitespace runs, byte fallback, CJK, emoji, control-piece look-alikes), the whole WikiText-2
 * test join by count + FNV-1a of the ids, malformed and unsupported models rejected with their
 * codes. Prints the encode throughput. */
#include "lq_test_tok.h"

static void test_rejects(const char *model_path) {
    char         *buf = NULL;
    int64_t       len = 0;
    lq_err        err = {0};
    lq_tokenizer *t   = NULL;
    CHECK_OK(lq_read_file(model_path, 1 << 26, &buf, &len, &err));
    if (!buf)
        return;
    /* truncated inside a piece */
    CHECK_EQ_INT(lq_tok_load_memory(buf, (size_t)len / 2 + 3, LQ_TOK_SPM, "half.model", &t, &err),
                 LQ_ERR_TOKENIZER_FORMAT);
    CHECK(t == NULL && strstr(err.msg, "half.model"));
    /* not a protobuf */
    CHECK_EQ_INT(lq_tok_load_memory("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11, LQ_TOK_SPM,
                                    "junk.model", &t, &err),
                 LQ_ERR_TOKENIZER_FORMAT);
    /* a unigram model: one piece {piece "a", score 0, type 1}, trainer_spec {model_type 1} */
    static const unsigned char uni[] = {0x0a, 0x08, 0x0a, 0x01, 'a',  0x15, 0,
                                        0,    0,    0,    0x12, 0x02, 0x18, 0x01};
    CHECK_EQ_INT(lq_tok_load_memory(uni, sizeof uni, LQ_TOK_SPM, "uni.model", &t, &err),
                 LQ_ERR_TOKENIZER_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "UNIGRAM") != NULL, "%s", err.msg);
    /* A 4-piece BPE model without byte fallback: a run of unknown characters is one <unk>,
     * as sentencepiece emits it. Pieces: <unk> (UNKNOWN), "a", U+2581, U+2581 "a" (score 1). */
    static const unsigned char bpe[] = {
        0x0a, 0x0e, 0x0a, 0x05, '<',  'u',  'n',  'k',  '>',  0x15, 0,   0,    0,
        0,    0x18, 0x02, 0x0a, 0x0a, 0x0a, 0x01, 'a',  0x15, 0,    0,   0,    0,
        0x18, 0x01, 0x0a, 0x0c, 0x0a, 0x03, 0xe2, 0x96, 0x81, 0x15, 0,   0,    0,
        0,    0x18, 0x01, 0x0a, 0x0d, 0x0a, 0x04, 0xe2, 0x96, 0x81, 'a', 0x15, 0,
        0,    0x80, 0x3f, 0x18, 0x01, 0x12, 0x02, 0x18, 0x02};
    CHECK_OK(lq_tok_load_memory(bpe, sizeof bpe, LQ_TOK_SPM, "tiny.model", &t, &err));
    if (t) {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        CHECK_OK(lq_tok_encode(t, "a  a", 4, 0, &ids, &n, &err)); /* extra spaces removed */
        CHECK(n == 2 && ids[0] == 3 && ids[1] == 3);
        free(ids);
        CHECK_OK(lq_tok_encode(t, "xyz a", 5, 0, &ids, &n, &err));
        CHECK_MSG(n == 3 && ids[0] == 2 && ids[1] == 0 && ids[2] == 3, "n %lld", (long long)n);
        free(ids);
        lq_tok_free(t);
    }
    free(buf);
}

int main(void) {
    const char *shared = lq_test_env_or_skip("LQ_SHARED");
    const char *data   = lq_test_env_or_skip("LQ_TEST_DATA");
    char        model[4096], vec[4096], ref[4096];
    snprintf(model, sizeof model, "%s/tokenizers/llama2/tokenizer.model", shared);
    snprintf(vec, sizeof vec, "%s/tok/llama2_spm.jsonl", data);
    snprintf(ref, sizeof ref, "%s/tok/llama2_spm_wikitext2.json", data);
    lq_tokenizer *t   = NULL;
    lq_err        err = {0};
    if (!lq_file_exists(model)) {
        printf("SKIP: %s not found (shared data: the Llama-2 tokenizer)\n", model);
        return 77;
    }
    CHECK_OK(lq_tok_load_file(model, &t, &err));
    if (!t) {
        fprintf(stderr, "%s\n", err.msg);
        return lq_test_end("tok_spm");
    }
    CHECK_EQ_INT(lq_tok_get_kind(t), LQ_TOK_SPM);
    CHECK_EQ_INT(lq_tok_vocab_size(t), 32000);
    CHECK_EQ_INT(lq_tok_bos_id(t), 1);
    CHECK_EQ_INT(lq_tok_eos_id(t), 2);
    CHECK(lq_tok_adds_bos(t));
    CHECK(!strcmp(lq_tok_piece(t, 29871), "\xe2\x96\x81"));
    int32_t *ids = NULL;
    int64_t  n   = 0;
    CHECK_OK(lq_tok_encode(t, "Hello", 5, 1, &ids, &n, &err));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 15043);
    free(ids);
    test_vectors(t, vec, "sentencepiece");
    test_wikitext(t, shared, ref, "sentencepiece");
    lq_tok_free(t);
    test_rejects(model);
    return lq_test_end("tok_spm");
}
