/* llmquant ppl MODEL_DIR --data FILE [--ctx N] [--protocol gptq|llamacpp] -> lq_perplexity. */
#include "cli.h"

#include <stdlib.h>

const cli_flag cli_ppl_flags[] = {
    {"data", 0, "FILE", 1, "evaluation text (.txt, .jsonl, .txt.zst, .jsonl.zst)"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_ppl(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    lq_callbacks cb     = cli_callbacks(c);
    char        *report = NULL;
    lq_err       err    = {0};
    cli_signals_install(a->pos[0], NULL);
    lq_status s = lq_perplexity(a->pos[0], a->flag_val[0], a->params, &cb, &report, &err);
    cli_signals_restore();
    return cli_finish_job(c, s, report, &err);
}
