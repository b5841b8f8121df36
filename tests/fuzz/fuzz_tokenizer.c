/* Fuzz the tokenizer loaders from memory (tokenizer.json, tokenizer.model, llama2.c .bin) and
 * encode a short string with whatever loads. Byte 0 picks the kind (mod 3); byte 1 is the length
 * of the text to encode, taken from the end of the input; the rest is the file. Loading must
 * either succeed or fail with a tokenizer / JSON / memory status and a one-line message naming
 * the input; encoding must succeed (or run out of memory) and return ids inside the vocab.
 * Seeds in corpus/tokenizer/: small valid files of each kind and broken variants. */
#include "lq_tok.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    lq_tok_kind kind = (lq_tok_kind)(data[0] % 3);
    size_t      tl   = data[1];
    if (tl > size - 2)
        tl = size - 2;
    const uint8_t *file = data + 2;
    size_t         fl   = size - 2 - tl;
    const char    *text = (const char *)data + size - tl;
    lq_tokenizer  *t    = NULL;
    lq_err         e    = {0};
    lq_status      s    = lq_tok_load_memory(file, fl, kind, "fuzz", &t, &e);
    if (s != LQ_OK) {
        if (s != LQ_ERR_TOKENIZER_FORMAT && s != LQ_ERR_TOKENIZER_UNSUPPORTED &&
            s != LQ_ERR_NOMEM && s != LQ_ERR_JSON)
            abort();
        if (t || e.code != s || strncmp(e.msg, "fuzz", 4) != 0 || strchr(e.msg, '\n'))
            abort();
        return 0;
    }
    int32_t *ids = NULL;
    int64_t  n   = 0;
    s            = lq_tok_encode(t, text, (int64_t)tl, 1, &ids, &n, &e);
    if (s == LQ_OK) {
        int64_t v = lq_tok_vocab_size(t);
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= v)
                abort();
    } else if (s != LQ_ERR_NOMEM && s != LQ_ERR_TOKENIZER_FORMAT &&
               s != LQ_ERR_TOKENIZER_UNSUPPORTED) {
        abort();
    }
    free(ids);
    lq_tok_free(t);
    return 0;
}
