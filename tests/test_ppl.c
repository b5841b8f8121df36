/* Perplexity protocols on the real stories260K model:
 *  - docs: reproduces the llama2.c reference NLL 1.266/token on tinystories_sample.txt
 *    (each <|endoftext|>-separated story stripped and encoded as BOS + text, all tokens scored;
 *    an fp64 numpy port of run.c on the original fp32 .bin gives 1.26644);
 *  - gptq: 512-token windows of the whole stream; the same port gives NLL 1.86211 over the 3
 *    windows (1533 scored tokens);
 *  - llamacpp: second-half scoring; needs 2 windows;
 *  - too little text is LQ_ERR_CALIB_EMPTY. */
#include "lq_test.h"
#include "llmquant.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>

static double run(const char *model, const char *data, const char *tok, const char *proto,
                  const char *ctx, int expect, double *nll, int64_t *scored) {
    lq_params *p   = lq_params_create();
    lq_err     err = {0};
    lq_params_set(p, "tokenizer", tok, &err);
    lq_params_set(p, "protocol", proto, &err);
    if (ctx)
        lq_params_set(p, "ctx", ctx, &err);
    char *js = NULL;
    int   s  = lq_perplexity(model, data, p, NULL, &js, &err);
    lq_params_free(p);
    CHECK_MSG(s == expect, "%s: status %s (%s)", proto, lq_status_name(s), err.msg);
    double ppl = -1;
    if (js) {
        cJSON *j = cJSON_Parse(js);
        ppl      = cJSON_GetObjectItem(j, "ppl")->valuedouble;
        *nll     = cJSON_GetObjectItem(j, "nll")->valuedouble;
        *scored  = (int64_t)cJSON_GetObjectItem(j, "tokens_scored")->valuedouble;
        printf("%-9s ctx %-4s ppl %.4f nll %.5f scored %lld (%.2fs)\n", proto, ctx ? ctx : "def",
               ppl, *nll, (long long)*scored, cJSON_GetObjectItem(j, "seconds")->valuedouble);
        cJSON_Delete(j);
        lq_free(js);
    }
    return ppl;
}

int main(void) {
    const char *sh = lq_test_env_or_skip("LQ_SHARED");
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    mkdir(tmp, 0755);
    char        model[4096], tok[4096], ts[4096], wt[4096], small[4200];
    snprintf(model, sizeof model, "%s/models/stories260K", sh);
    snprintf(tok, sizeof tok, "%s/models/stories260K/llama2c/tok512.bin", sh);
    snprintf(ts, sizeof ts, "%s/data/tinystories/tinystories_sample.txt", sh);
    snprintf(wt, sizeof wt, "%s/data/wikitext2/wikitext2_test_hf_join.txt", sh);
    double  nll;
    int64_t scored;
    run(model, ts, tok, "docs", NULL, LQ_OK, &nll, &scored);
    CHECK_NEAR(nll, 1.266, 0.002);
    CHECK_EQ_INT(scored, 1804);
    run(model, ts, tok, "gptq", "512", LQ_OK, &nll, &scored);
    CHECK_NEAR(nll, 1.86211, 1e-3);
    CHECK_EQ_INT(scored, 1533);
    double p1 = run(model, ts, tok, "llamacpp", "512", LQ_OK, &nll, &scored);
    CHECK_EQ_INT(scored, 3 * 255);
    CHECK(p1 > 1 && p1 < 20);
    char tiny[4200];
    snprintf(tiny, sizeof tiny, "%s/tiny.txt", tmp);
    FILE *tf = fopen(tiny, "w");
    if (tf) {
        fputs("Once upon a time there was a cat.", tf);
        fclose(tf);
    }
    run(model, tiny, tok, "gptq", "512", LQ_ERR_CALIB_EMPTY, &nll, &scored);
    run(model, ts, tok, "llamacpp", "1000", LQ_ERR_INVALID_ARG, &nll, &scored);

    /* WikiText-2 (the first 16 KiB keeps the test fast; a TinyStories model, so no bound
     * beyond finiteness and determinism). */
    FILE *in = fopen(wt, "rb");
    snprintf(small, sizeof small, "%s/wt16k.txt", tmp);
    FILE *out = fopen(small, "wb");
    CHECK(in && out);
    if (in && out) {
        static char buf[16384];
        size_t      k = fread(buf, 1, sizeof buf, in);
        fwrite(buf, 1, k, out);
    }
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    double nll2;
    double a = run(model, small, tok, "gptq", NULL, LQ_OK, &nll, &scored);
    double b = run(model, small, tok, "gptq", NULL, LQ_OK, &nll2, &scored);
    CHECK(isfinite(a) && a > 1);
    CHECK(a == b);
    return lq_test_end("ppl");
}
