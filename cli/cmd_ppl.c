/* llmquant ppl MODEL_DIR --data FILE [--ctx N] [--protocol gptq|llamacpp] -> lq_perplexity. */
#include "cli.h"

#include <stdlib.h>

/* TODO(ppl): set to 1 once quant/lq_ppl.c (lq_perplexity, owned by the model engineer) is in
 * main. Until then the library does not define lq_perplexity, so calling it would not link; the
 * command still parses and validates its arguments and then reports LQ_ERR_UNSUPPORTED. */
#ifndef LQ_CLI_PPL_LINKED
#define LQ_CLI_PPL_LINKED 1
#endif

const cli_flag cli_ppl_flags[] = {
    {"data", 0, "FILE", 1, "evaluation text (.txt, .jsonl, .txt.zst, .jsonl.zst)"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_ppl(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
#if LQ_CLI_PPL_LINKED
    lq_callbacks cb     = cli_callbacks(c);
    char        *report = NULL;
    lq_err       err    = {0};
    cli_signals_install();
    lq_status s = lq_perplexity(a->pos[0], a->flag_val[0], a->params, &cb, &report, &err);
    cli_signals_restore();
    cli_progress_clear(c);
    cli_emit_report(c, report);
    lq_free(report);
    return s == LQ_OK ? 0 : cli_fail(c, s, &err);
#else
    (void)a;
    return cli_error(c, LQ_ERR_UNSUPPORTED, "ppl: not available yet (perplexity is not in this "
                                            "build)");
#endif
}
