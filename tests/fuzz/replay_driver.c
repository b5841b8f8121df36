/* Runs a fuzz target over every file of a corpus directory (no libFuzzer needed), so the corpus
 * and past crash reproducers are regression tests under ctest and the sanitizer build. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        printf("SKIP: no corpus directory %s\n", argv[1]);
        return 77;
    }
    struct dirent *de;
    int            n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char        p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", argv[1], de->d_name);
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        FILE *f = fopen(p, "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(sz > 0 ? (size_t)sz : 1);
        size_t   got = buf ? fread(buf, 1, (size_t)(sz > 0 ? sz : 0), f) : 0;
        fclose(f);
        if (buf) {
            LLVMFuzzerTestOneInput(buf, got);
            free(buf);
            n++;
        }
    }
    closedir(d);
    printf("replayed %d inputs from %s\n", n, argv[1]);
    return n > 0 ? 0 : 1;
}
