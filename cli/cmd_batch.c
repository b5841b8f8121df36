/* llmquant batch: placeholder until the jobs engineer wires it (replace this file). */
#include "cli.h"

int cmd_batch(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)a;
    return cli_error(c, LQ_ERR_UNSUPPORTED, "%s: not available yet", cmd->name);
}
