/* Placeholder entry point until the CLI lands (cli/ owns all printing). */
#include "llmquant.h"

#include <stdio.h>

int main(void) {
    printf("llmquant %s\n", lq_version_string());
    return 0;
}
