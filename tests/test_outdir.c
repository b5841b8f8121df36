/* All-or-nothing output directories: abort leaves nothing, commit appears atomically, existing
 * outputs are protected unless forced, stale temporaries of dead runs are cleaned. */
#include "lq_outdir.h"
#include "lq_test.h"

#include <sys/stat.h>
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
    CHECK(file_has(p, "two")); /* old output intact while the new one is written */
    CHECK_OK(lq_outdir_commit(&o, &err));
    CHECK(file_has(p, "three"));

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
