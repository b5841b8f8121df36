/* All-or-nothing output directories: abort leaves nothing, commit appears atomically, existing
 * outputs are protected unless forced, stale temporaries of dead runs are cleaned. */
#include "lq_outdir.h"
#include "lq_test.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static void put(const lq_outdir *o, const char *name, const char *text) {
    char   p[4096];
    lq_err err;
    CHECK_OK(lq_outdir_path(o, name, p, sizeof p, &err));
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int file_has(const char *path, const char *text) {
    char buf[256] = {0};
    FILE *f       = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strcmp(buf, text) == 0;
}

int main(void) {
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    mkdir(tmp, 0755);
    char base[4096], fin[4096], p[4200];
    snprintf(base, sizeof base, "%s/outdir", tmp);
    lq_remove_tree(base);
    CHECK(mkdir(base, 0755) == 0);
    snprintf(fin, sizeof fin, "%s/model-q", base);
    lq_outdir o;
    lq_err    err = {0};

    CHECK_OK(lq_outdir_begin(&o, fin, 0, &err));
    put(&o, "a.txt", "one");
    lq_outdir_abort(&o);
    CHECK(!lq_dir_exists(fin));
    CHECK(!lq_dir_exists(o.tmp_path));

    CHECK_OK(lq_outdir_begin(&o, fin, 0, &err));
    put(&o, "a.txt", "two");
    put(&o, "llmquant_report.json", "{}"); /* what every job writes: the mark of our output */
    CHECK(!lq_dir_exists(fin)); /* invisible until commit */
    CHECK_OK(lq_outdir_commit(&o, &err));
    snprintf(p, sizeof p, "%s/a.txt", fin);
    CHECK(file_has(p, "two"));
    lq_outdir_abort(&o); /* no-op after commit */
    CHECK(file_has(p, "two"));

    CHECK_EQ_INT(lq_outdir_begin(&o, fin, 0, &err), LQ_ERR_EXISTS);
    CHECK(strstr(err.msg, "--force") != NULL);

    CHECK_OK(lq_outdir_begin(&o, fin, 1, &err));
    put(&o, "a.txt", "three");
    put(&o, "llmquant_report.json", "{}");
    CHECK(file_has(p, "two")); /* old output intact while the new one is written */
    /* one writer: a second begin on the same output is refused while the first holds it */
    lq_outdir o2;
    CHECK_EQ_INT(lq_outdir_begin(&o2, fin, 1, &err), LQ_ERR_LOCKED);
    CHECK(strstr(err.msg, "another llmquant process") != NULL);
    CHECK_OK(lq_outdir_commit(&o, &err));
    CHECK(file_has(p, "three"));
    /* released: the next one gets it, and no lock file stays behind */
    CHECK_OK(lq_outdir_begin(&o2, fin, 1, &err));
    lq_outdir_abort(&o2);
    char lk[4200];
    snprintf(lk, sizeof lk, "%s/.model-q.lqlock", base);
    CHECK(!lq_file_exists(lk));

    /* --force replaces only our outputs or empty directories; the rest is left untouched */
    char foreign[4200], file[4200], link[4200], fifo[4200], empty[4200];
    snprintf(foreign, sizeof foreign, "%s/foreign", base);
    mkdir(foreign, 0755);
    snprintf(p, sizeof p, "%s/data.bin", foreign);
    FILE *f = fopen(p, "w");
    if (f)
        fputs("precious", f), fclose(f);
    CHECK_EQ_INT(lq_outdir_begin(&o, foreign, 1, &err), LQ_ERR_OUTPUT_FOREIGN);
    CHECK(strstr(err.msg, "did not write") != NULL && file_has(p, "precious"));
    snprintf(file, sizeof file, "%s/file", base);
    f = fopen(file, "w");
    if (f)
        fputs("x", f), fclose(f);
    CHECK_EQ_INT(lq_outdir_begin(&o, file, 1, &err), LQ_ERR_OUTPUT_FOREIGN);
    CHECK(strstr(err.msg, "is a file") != NULL && file_has(file, "x"));
    snprintf(link, sizeof link, "%s/link", base);
    CHECK(symlink(fin, link) == 0); /* even to one of our outputs: links are not replaced */
    CHECK_EQ_INT(lq_outdir_begin(&o, link, 1, &err), LQ_ERR_OUTPUT_FOREIGN);
    CHECK(strstr(err.msg, "symbolic link") != NULL);
    snprintf(p, sizeof p, "%s/a.txt", fin);
    CHECK(file_has(p, "three"));
    snprintf(fifo, sizeof fifo, "%s/fifo", base);
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_EQ_INT(lq_outdir_begin(&o, fifo, 1, &err), LQ_ERR_OUTPUT_FOREIGN);
    snprintf(empty, sizeof empty, "%s/empty", base);
    mkdir(empty, 0755);
    CHECK_OK(lq_outdir_begin(&o, empty, 1, &err));
    put(&o, "llmquant_report.json", "{}");
    CHECK_OK(lq_outdir_commit(&o, &err));

    /* a temporary left by a dead process (pid far above pid_max) is removed */
    char stale[4200];
    snprintf(stale, sizeof stale, "%s/.model-q.lqtmp-999999999", base);
    CHECK(mkdir(stale, 0755) == 0);
    CHECK_OK(lq_outdir_begin(&o, fin, 1, &err));
    CHECK(!lq_dir_exists(stale));
    lq_outdir_abort(&o);

    snprintf(p, sizeof p, "%s/nonexistent/child", base);
    CHECK_EQ_INT(lq_outdir_begin(&o, p, 0, &err), LQ_ERR_NOT_FOUND);

    /* copy */
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/a.txt", fin);
    snprintf(dst, sizeof dst, "%s/b.txt", base);
    CHECK_OK(lq_copy_file(src, dst, &err));
    CHECK(file_has(dst, "three"));
    CHECK_EQ_INT(lq_copy_file("/nonexistent/x", dst, &err), LQ_ERR_NOT_FOUND);

    /* permission: a read-only parent (meaningless as root, which bypasses permissions) */
    if (geteuid() != 0) {
        char ro[4200];
        snprintf(ro, sizeof ro, "%s/ro", base);
        mkdir(ro, 0555);
        snprintf(p, sizeof p, "%s/out", ro);
        CHECK_EQ_INT(lq_outdir_begin(&o, p, 0, &err), LQ_ERR_PERMISSION);
        chmod(ro, 0755);
    }
    lq_remove_tree(base);
    return lq_test_end("outdir");
}
