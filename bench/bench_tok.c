/* Tokenizer throughput: encode a whole text file (default: WikiText-2 test "\n\n" join) with a
 * tokenizer (default: the Llama-2 tokenizer.model), best of `reps` runs.
 *   bench_tok [tokenizer-file] [text-file] [reps=5]
 * Defaults are looked up under $LQ_SHARED (or ../shared). Prints ids, seconds, tokens/s, MB/s
 * and an FNV-1a hash of the ids so runs can be compared with the python reference
 * (tests/py/test_tok_oracle.py --bench prints the same line for sentencepiece/tokenizers). */
#include "lq_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *sh = getenv("LQ_SHARED");
    char        tp[4096], xp[4096];
    snprintf(tp, sizeof tp, "%s/tokenizers/llama2/tokenizer.model", sh ? sh : "../shared");
    snprintf(xp, sizeof xp, "%s/data/wikitext2/wikitext2_test_hf_join.txt",
             sh ? sh : "../shared");
    const char *tok  = argc > 1 ? argv[1] : tp;
    const char *text = argc > 2 ? argv[2] : xp;
    int         reps = argc > 3 ? atoi(argv[3]) : 5;
    lq_err        e = {0};
    lq_tokenizer *t = NULL;
    char         *b = NULL;
    int64_t       n = 0;
    if (lq_tok_load_file(tok, &t, &e) != LQ_OK || lq_read_file(text, 1ll << 32, &b, &n, &e))
        return fprintf(stderr, "%s\n", e.msg), 1;
    double   best = 1e30;
    int64_t  nid  = 0;
    uint64_t h    = 1469598103934665603ull;
    for (int r = 0; r < (reps > 0 ? reps : 1); r++) {
        int32_t *ids = NULL;
        double   t0  = lq_now();
        if (lq_tok_encode(t, b, n, 0, &ids, &nid, &e) != LQ_OK)
            return fprintf(stderr, "%s\n", e.msg), 1;
        double dt = lq_now() - t0;
        if (dt < best)
            best = dt;
        if (r == 0)
            for (int64_t i = 0; i < nid; i++) {
                h ^= (uint32_t)ids[i];
                h *= 1099511628211ull;
            }
        free(ids);
    }
    printf("llmquant %s: %lld bytes -> %lld ids in %.3f s: %.0f tokens/s, %.1f MB/s, hash "
           "%016llx\n",
           tok, (long long)n, (long long)nid, best, (double)nid / best, (double)n / best / 1e6,
           (unsigned long long)h);
    free(b);
    lq_tok_free(t);
    return 0;
}
