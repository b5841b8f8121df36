/* llmquant convert MODEL -o OUT_DIR [--out-dtype ...] -> lq_convert. */
#include "cli.h"

const cli_flag cli_convert_flags[] = {
    {"output", 'o', "OUT_DIR", 1, "output directory (must not exist unless --force)"},
    {NULL, 0, NULL, 0, NULL},
};

int cmd_convert(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    const char  *out    = a->flag_val[0];
    lq_callbacks cb     = cli_callbacks(c);
    char        *report = NULL;
    lq_err       err    = {0};
    cli_signals_install(a->pos[0], out);
    lq_status s = lq_convert(a->pos[0], out, a->params, &cb, &report, &err);
    cli_signals_restore();
    return cli_finish_job(c, s, report, &err);
}
