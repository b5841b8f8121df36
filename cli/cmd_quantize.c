/* llmquant METHOD MODEL_DIR -o OUT_DIR [options] -> lq_quantize. */
#include "cli.h"

#include <stdlib.h>

const cli_flag cli_quantize_flags[] = {
    {"output", 'o', "OUT_DIR", 1, "output directory (must not exist unless --force)"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_quantize(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    const char  *out    = a->flag_val[0];
    lq_callbacks cb     = cli_callbacks(c);
    char        *report = NULL;
    lq_err       err    = {0};
    cli_signals_install();
    lq_status s = lq_quantize(cmd->name, a->pos[0], out, a->params, &cb, &report, &err);
    cli_signals_restore();
    cli_progress_clear(c);
    /* The report also comes with LQ_ERR_PPL_BOUND (the output was written and marked): the
     * table shows the check; with -q the error line alone is the result. */
    if (s == LQ_OK || !c->quiet)
        cli_emit_report(c, report);
    lq_free(report);
    if (s != LQ_OK)
        return cli_fail(c, s, &err);
    (void)out;
    return 0;
}
