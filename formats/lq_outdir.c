#define _XOPEN_SOURCE 700 /* realpath */
#include "lq_outdir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sys/file.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lq_remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *de;
    int            rc = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4096];
        if (snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= (int)sizeof p) {
            rc = -1;
            continue;
        }
        rc |= lq_remove_tree(p);
    }
    closedir(d);
    return rmdir(path) | rc;
}

static void split_parent(const char *path, char *parent, size_t pcap, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(parent, pcap, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(parent, pcap, "/");
        *base = slash + 1;
    } else {
        snprintf(parent, pcap, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

/* A process that no longer runs: gone, or a zombie nobody reaped (containers without an init
 * keep killed children as zombies forever). */
static int pid_dead(long pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return 1;
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n]         = 0;
    const char *rp = strrchr(buf, ')'); /* "pid (comm) S ..." -- comm may contain spaces */
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* ".<base>.lqtmp-<pid>" siblings whose pid is gone are leftovers of a killed run. */
static void remove_stale(const char *parent, const char *base) {
    DIR *d = opendir(parent);
    if (!d)
        return;
    char prefix[512];
    snprintf(prefix, sizeof prefix, ".%s.lqtmp-", base);
    size_t         pl = strlen(prefix);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, pl) != 0)
            continue;
        long pid = strtol(de->d_name + pl, NULL, 10);
        if (pid > 0 && pid_dead(pid)) {
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", parent, de->d_name);
            lq_remove_tree(p);
        }
    }
    closedir(d);
}

/* The marker a directory written by llmquant holds (every job writes it last). */
#define LQ_REPORT_NAME "llmquant_report.json"

/* An output equal to, inside or around the input could destroy the input (--force replaces
 * the output directory). */
int lq_paths_overlap(const char *model_dir, const char *out_dir) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(model_dir, a))
        return 0;
    char   parent[PATH_MAX];
    size_t n = strlen(out_dir);
    if (n >= sizeof parent)
        return 0;
    memcpy(parent, out_dir, n + 1);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char       *slash = strrchr(parent, '/');
    const char *base  = slash ? slash + 1 : parent;
    if (slash == parent)
        strcpy(b, "/");
    else if (slash) {
        *slash = 0;
        if (!realpath(parent, b))
            return 0;
    } else if (!realpath(".", b))
        return 0;
    size_t bl = strlen(b);
    if (bl + 1 + strlen(base) + 1 > sizeof b)
        return 0;
    if (b[bl - 1] != '/')
        b[bl++] = '/';
    strcpy(b + bl, base);
    size_t al = strlen(a);
    bl        = strlen(b);
    return strcmp(a, b) == 0 || (strncmp(a, b, al) == 0 && b[al] == '/') ||
           (strncmp(b, a, bl) == 0 && a[bl] == '/');
}

lq_status lq_outdir_check(const char *final_path, int force, lq_err *err) {
    struct stat sb;
    if (lstat(final_path, &sb) != 0)
        return errno == ENOENT ? LQ_OK
                               : lq_fail(err, lq_status_from_errno(errno), "%s: %s", final_path,
                                         strerror(errno));
    if (!force)
        LQ_FAIL(err, LQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", final_path);
    if (S_ISLNK(sb.st_mode))
        LQ_FAIL(err, LQ_ERR_OUTPUT_FOREIGN,
                "%s: is a symbolic link; --force does not replace links (remove it or choose "
                "another output)",
                final_path);
    if (!S_ISDIR(sb.st_mode))
        LQ_FAIL(err, LQ_ERR_OUTPUT_FOREIGN,
                "%s: is %s, not a directory llmquant wrote; --force refuses to replace it",
                final_path, S_ISREG(sb.st_mode) ? "a file" : "a device, pipe or socket");
    DIR *d = opendir(final_path);
    if (!d)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", final_path, strerror(errno));
    int            entries = 0, marker = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        entries++;
        if (!strcmp(de->d_name, LQ_REPORT_NAME)) {
            char        p[4200];
            struct stat rb;
            snprintf(p, sizeof p, "%s/%s", final_path, de->d_name);
            marker = lstat(p, &rb) == 0 && S_ISREG(rb.st_mode);
        }
    }
    closedir(d);
    if (entries && !marker)
        LQ_FAIL(err, LQ_ERR_OUTPUT_FOREIGN,
                "%s: is a directory llmquant did not write (no %s); --force replaces only "
                "llmquant outputs and empty directories",
                final_path, LQ_REPORT_NAME);
    return LQ_OK;
}

static void unlock(lq_outdir *o) {
    if (o->lock_fd < 0)
        return;
    unlink(o->lock_path); /* under the lock: whoever opens it next gets a fresh file */
    close(o->lock_fd);
    o->lock_fd = -1;
}

/* flock on a file next to the output. The file is unlinked by its holder on release, so a taker
 * checks that the file it locked is still the one at the path (else it raced an unlink and
 * retries). A killed holder's lock dies with it; its file is then simply reused. */
static lq_status lock(lq_outdir *o, const char *parent, const char *base, lq_err *err) {
    snprintf(o->lock_path, sizeof o->lock_path, "%s/.%s.lqlock", parent, base);
    for (int tries = 0; tries < 100; tries++) {
        int fd = open(o->lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            LQ_FAIL(err, lq_status_from_errno(errno), "%s: cannot create lock %s: %s",
                    o->final_path, o->lock_path, strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK)
                LQ_FAIL(err, LQ_ERR_LOCKED,
                        "%s: another llmquant process is writing this output (lock %s)",
                        o->final_path, o->lock_path);
            LQ_FAIL(err, lq_status_from_errno(e), "%s: cannot lock: %s", o->final_path,
                    strerror(e));
        }
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(o->lock_path, &b) == 0 && a.st_ino == b.st_ino &&
            a.st_dev == b.st_dev) {
            char pid[32];
            int  n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || write(fd, pid, (size_t)n) != n) {
                /* the pid is for people looking at the file; the lock works without it */
            }
            o->lock_fd = fd;
            return LQ_OK;
        }
        close(fd);
    }
    LQ_FAIL(err, LQ_ERR_LOCKED, "%s: lock %s keeps changing under us", o->final_path, o->lock_path);
}

lq_status lq_outdir_begin(lq_outdir *o, const char *final_path, int force, lq_err *err) {
    memset(o, 0, sizeof *o);
    o->lock_fd = -1;
    size_t n   = strlen(final_path);
    while (n > 1 && final_path[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof o->final_path - 64)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "output path \"%s\" is empty or too long", final_path);
    memcpy(o->final_path, final_path, n);
    o->final_path[n] = 0;
    char        parent[4096];
    const char *base;
    split_parent(o->final_path, parent, sizeof parent, &base);
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: output must name a directory", final_path);
    if (!lq_dir_exists(parent))
        LQ_FAIL(err, LQ_ERR_NOT_FOUND, "%s: parent directory %s does not exist", o->final_path,
                parent);
    LQ_TRY(lq_outdir_check(o->final_path, force, err));
    lq_status st = lock(o, parent, base, err);
    if (st == LQ_OK) /* again, now that nobody else can be writing it */
        st = lq_outdir_check(o->final_path, force, err);
    if (st != LQ_OK) {
        unlock(o);
        return st;
    }
    remove_stale(parent, base);
    snprintf(o->tmp_path, sizeof o->tmp_path, "%s/.%s.lqtmp-%ld", parent, base, (long)getpid());
    lq_remove_tree(o->tmp_path);
    if (mkdir(o->tmp_path, 0755) != 0) {
        st             = lq_fail(err, lq_status_from_errno(errno), "%s: cannot create output: %s",
                                 o->final_path, strerror(errno));
        o->tmp_path[0] = 0;
        unlock(o);
        return st;
    }
    return LQ_OK;
}

lq_status lq_outdir_path(const lq_outdir *o, const char *name, char *buf, size_t cap, lq_err *err) {
    if (!lq_path_join(buf, cap, o->tmp_path, name))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s/%s: path too long", o->final_path, name);
    return LQ_OK;
}

static int fsync_path(const char *p) {
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

lq_status lq_outdir_commit(lq_outdir *o, lq_err *err) {
    DIR *d = opendir(o->tmp_path);
    if (!d)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", o->tmp_path, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", o->tmp_path, de->d_name);
        if (fsync_path(p) != 0 && errno != EINVAL) {
            int e = errno;
            closedir(d);
            LQ_FAIL(err, lq_status_from_errno(e), "%s: fsync failed: %s", p, strerror(e));
        }
    }
    closedir(d);
    fsync_path(o->tmp_path);
    struct stat sb;
    /* what was checked at begin could have been swapped for something else since (no llmquant
     * process could: the lock keeps them out) */
    LQ_TRY(lq_outdir_check(o->final_path, 1, err));
    if (lstat(o->final_path, &sb) == 0) {
        /* --force: move the old one aside first so the swap leaves one or the other. */
        char old[4200];
        snprintf(old, sizeof old, "%s.lqold-%ld", o->tmp_path, (long)getpid());
        if (rename(o->final_path, old) != 0)
            LQ_FAIL(err, lq_status_from_errno(errno), "%s: cannot replace: %s", o->final_path,
                    strerror(errno));
        if (rename(o->tmp_path, o->final_path) != 0) {
            int e = errno;
            rename(old, o->final_path);
            LQ_FAIL(err, lq_status_from_errno(e), "%s: rename failed: %s", o->final_path,
                    strerror(e));
        }
        lq_remove_tree(old);
    } else if (rename(o->tmp_path, o->final_path) != 0) {
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: rename failed: %s", o->final_path,
                strerror(errno));
    }
    char        parent[4096];
    const char *base;
    split_parent(o->final_path, parent, sizeof parent, &base);
    fsync_path(parent);
    o->committed = 1;
    unlock(o);
    return LQ_OK;
}

void lq_outdir_abort(lq_outdir *o) {
    if (!o)
        return;
    if (!o->committed && o->tmp_path[0])
        lq_remove_tree(o->tmp_path);
    if (o->lock_path[0])
        unlock(o);
}

lq_status lq_output_discard(const char *out_dir) {
    if (!out_dir || !*out_dir)
        return LQ_ERR_INVALID_ARG;
    char        parent[PATH_MAX], p[PATH_MAX + 600];
    const char *base;
    split_parent(out_dir, parent, sizeof parent, &base);
    if (!*base)
        return LQ_ERR_INVALID_ARG;
    snprintf(p, sizeof p, "%s/.%s.lqtmp-%ld", parent, base, (long)getpid());
    lq_remove_tree(p);
    /* the lock file, only while it still names this process (after the exec that brings us
     * here the lock is released, and another run may hold it by now) */
    snprintf(p, sizeof p, "%s/.%s.lqlock", parent, base);
    char  buf[32] = "", want[32];
    FILE *f       = fopen(p, "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n]   = 0;
        fclose(f);
    }
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    if (!strcmp(buf, want))
        unlink(p);
    return LQ_OK;
}

lq_status lq_outdir_write_side_files(const lq_outdir *o, const lq_source *src, lq_err *err) {
    static const char *const names[] = {
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "generation_config.json",
        "tokenizer.bin",
    };
    char dst[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char     *data = NULL;
        int64_t   len  = 0;
        lq_status st   = lq_source_read(src, names[i], &data, &len, err);
        if (st == LQ_ERR_NOT_FOUND)
            continue;
        if (st == LQ_OK && (st = lq_outdir_path(o, names[i], dst, sizeof dst, err)) == LQ_OK)
            st = lq_write_file(dst, data, len, err);
        free(data);
        LQ_TRY(st);
    }
    return LQ_OK;
}

lq_status lq_write_file(const char *path, const void *data, int64_t len, lq_err *err) {
    FILE *f = fopen(path, "wb");
    if (!f)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", path, strerror(errno));
    size_t w  = len > 0 ? fwrite(data, 1, (size_t)len, f) : 0;
    int    e  = errno;
    int    ok = w == (size_t)(len > 0 ? len : 0) && !ferror(f);
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e  = errno;
    }
    if (!ok) {
        unlink(path);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", path, strerror(e));
    }
    return LQ_OK;
}

lq_status lq_copy_file(const char *src, const char *dst, lq_err *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        LQ_FAIL(err, lq_status_from_errno(e), "%s: %s", dst, strerror(e));
    }
    char      buf[1 << 16];
    lq_status st = LQ_OK;
    for (;;) {
        ssize_t k = read(in, buf, sizeof buf);
        if (k == 0)
            break;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            st = lq_fail(err, LQ_ERR_IO, "%s: read failed: %s", src, strerror(errno));
            break;
        }
        for (ssize_t off = 0; off < k;) {
            ssize_t w = write(out, buf + off, (size_t)(k - off));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                st = lq_fail(err, lq_status_from_errno(errno), "%s: write failed: %s", dst,
                             strerror(errno));
                break;
            }
            off += w;
        }
        if (st)
            break;
    }
    close(in);
    if (close(out) != 0 && st == LQ_OK)
        st = lq_fail(err, lq_status_from_errno(errno), "%s: %s", dst, strerror(errno));
    if (st)
        unlink(dst);
    return st;
}
