/* Fuzz the tokenizer loaders (llama2.c .bin, SentencePiece protobuf, tokenizer.json) and the
 * encoders. The first byte picks the kind; the rest is the file. Whatever loads must encode a
 * fixed text (and the input itself, as text) into ids inside the vocabulary; whatever is
 * rejected must say why. */
#include "lq_tok.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void encode_check(const lq_tokenizer *t, const char *s, size_t n) {
    int32_t *ids = NULL;
    int64_t  k   = 0;
    lq_err   err = {0};
    if (lq_tok_encode(t, s, (int64_t)n, 1, &ids, &k, &err) == LQ_OK) {
        for (int64_t i = 0; i < k; i++)
            if (ids[i] < 0 || ids[i] >= lq_tok_vocab_size(t))
                abort();
    } else if (!err.msg[0]) {
        abort();
    }
    free(ids);
}

static lq_status take(void *user, const int32_t *ids, int64_t n, lq_err *err) {
    const int64_t *vocab = user;
    (void)err;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= *vocab)
            abort();
    return LQ_OK;
}

/* The streaming encoder (what ppl uses) with parts small enough to cut a short input: ids in
 * range, an error only with a message. Whether they equal the whole-text ids is the tests'
 * (real tokenizers, tests/lq_test_tok.h): a crafted tokenizer can reach past any window. */
static void stream_check(const lq_tokenizer *t, const char *s, size_t n) {
    lq_err         err   = {0};
    lq_tok_stream *st    = NULL;
    int64_t        vocab = lq_tok_vocab_size(t);
    if (lq_tok_stream_create(t, 1, 64, take, &vocab, &st, &err) != LQ_OK)
        abort();
    lq_status rc = LQ_OK;
    for (size_t i = 0; i < n && rc == LQ_OK; i += 7)
        rc = lq_tok_stream_push(st, s + i, (int64_t)(n - i < 7 ? n - i : 7), &err);
    if (rc == LQ_OK)
        rc = lq_tok_stream_finish(st, &err);
    if (rc != LQ_OK && !err.msg[0])
        abort();
    lq_tok_stream_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const lq_tok_kind kinds[3] = {LQ_TOK_LLAMA2C, LQ_TOK_SPM, LQ_TOK_HF_JSON};
    lq_tokenizer     *t        = NULL;
    lq_err            err      = {0};
    lq_status s = lq_tok_load_memory(data + 1, size - 1, kinds[data[0] % 3], "fuzz", &t, &err);
    if (s != LQ_OK) {
        if (!err.msg[0] || t)
            abort();
        return 0;
    }
    static const char text[] = "Hello  world\n\n caf\xc3\xa9 \xf0\x9f\xa4\x97 <s> 123 \xff\xfe x";
    encode_check(t, text, sizeof text - 1);
    encode_check(t, (const char *)data, size > 512 ? 512 : size);
    static const char lines[] = "one line\ntwo  lines\n\nthree\r\nfour \xc3\xa9\n  five\n"
                                "six six six six six six six six\nseven\n\n\neight 8 88 888\n";
    stream_check(t, lines, sizeof lines - 1);
    stream_check(t, (const char *)data, size > 512 ? 512 : size);
    stream_check(t, NULL, 0); /* finish with nothing pushed */
    lq_tok_free(t);
    return 0;
}
