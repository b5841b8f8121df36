/* llmquant exit-codes: the lq_status table. README.md embeds this output verbatim between
 * markers, and tests/e2e/cli_readme.sh keeps the two in sync. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* Exit codes live in 0..125 (126+ mean "not executable"/signals to shells). */
#define MAX_CODE 126

static int known(int code) {
    return strcmp(lq_status_name((lq_status)code), "LQ_ERR_UNKNOWN") != 0;
}

int cmd_exit_codes(cli_ctx *c, const cli_cmd *cmd, cli_args *a) {
    (void)cmd;
    (void)a;
    if (c->json) {
        cJSON *arr = cJSON_CreateArray();
        for (int s = 0; s < MAX_CODE; s++) {
            if (!known(s))
                continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "code", s);
            cJSON_AddStringToObject(o, "name", lq_status_name((lq_status)s));
            cJSON_AddStringToObject(o, "meaning", lq_status_str((lq_status)s));
            cJSON_AddItemToArray(arr, o);
        }
        char *t = cJSON_PrintUnformatted(arr);
        if (t)
            printf("%s\n", t);
        free(t);
        cJSON_Delete(arr);
        return 0;
    }
    printf("| code | name | meaning |\n|---:|---|---|\n");
    for (int s = 0; s < MAX_CODE; s++)
        if (known(s))
            printf("| %d | `%s` | %s |\n", s, lq_status_name((lq_status)s),
                   lq_status_str((lq_status)s));
    return 0;
}
