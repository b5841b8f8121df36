/* llmquant METHOD MODEL_DIR -o OUT_DIR [options] -> lq_quantize. */
#include "cli.h"

#include <stdlib.h>

const cli_flag cli_quantize_flags[] = {
    {"output", 'o', "OUT_DIR", 1,
     "output directory (a .gguf file with --format gguf:TYPE); must not exist unless --force"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_quantize(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    const char  *out    = a->flag_val[0];
    lq_callbacks cb     = cli_callbacks(c);
    char        *report = NULL;
    lq_err       err    = {0};
    cli_signals_install(a->pos[0], out);
    lq_status s = lq_quantize(cmd->name, a->pos[0], out, a->params, &cb, &report, &err);
    cli_signals_restore();
    return cli_finish_job(c, s, report, &err);
}
