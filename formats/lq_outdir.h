/* lq_outdir.h -- all-or-nothing output directories: everything is written into a hidden sibling
 * temporary directory which is renamed onto the final name only when complete, so a crash, a
 * kill, ENOSPC or a failed check never leaves a half-written checkpoint under the final name.
 *
 * Safety: --force replaces only a directory llmquant wrote (it holds llmquant_report.json) or an
 * empty one; a file, device, symbolic link or any other directory is refused
 * (LQ_ERR_OUTPUT_FOREIGN) and left untouched. One writer per output: a lock file next to it
 * (".<name>.lqlock", flock) is held from begin to commit/abort, so a second process writing the
 * same output fails at once with LQ_ERR_LOCKED instead of racing the first. */
#ifndef LQ_OUTDIR_H
#define LQ_OUTDIR_H

#include "lq_base.h"
#include "lq_source.h"

typedef struct lq_outdir {
    char final_path[4096];
    char tmp_path[4096];
    char lock_path[4200];
    int  lock_fd; /* -1: none */
    int  committed;
} lq_outdir;

/* Whether final_path may be written: absent; or present and force, and a directory llmquant
 * wrote or an empty one. LQ_ERR_EXISTS (present, no force), LQ_ERR_OUTPUT_FOREIGN. Checked up
 * front by the jobs and again under the lock. */
lq_status lq_outdir_check(const char *final_path, int force, lq_err *err);
/* An output equal to, inside or around the input (which --force could destroy). */
int lq_paths_overlap(const char *input, const char *out_dir);
/* Takes the lock (LQ_ERR_LOCKED when another process holds it), runs lq_outdir_check, creates
 * the temporary directory. LQ_ERR_NOT_FOUND if the parent is missing. Stale temporaries of dead
 * processes next to it are removed. */
lq_status lq_outdir_begin(lq_outdir *o, const char *final_path, int force, lq_err *err);
/* Path of a file inside the temporary directory. */
lq_status lq_outdir_path(const lq_outdir *o, const char *name, char *buf, size_t cap, lq_err *err);
/* fsync the files and directory, replace an existing final dir (force), rename into place. */
lq_status lq_outdir_commit(lq_outdir *o, lq_err *err);
/* Remove the temporary directory (no-op after commit) and release the lock. */
void lq_outdir_abort(lq_outdir *o);

/* The files that travel with a checkpoint (tokenizer, its config, generation defaults) from src
 * (copied from a model directory, rebuilt from a GGUF file) into the temporary directory. */
lq_status lq_outdir_write_side_files(const lq_outdir *o, const lq_source *src, lq_err *err);
/* Write len bytes to a new file (side files rebuilt in memory). */
lq_status lq_write_file(const char *path, const void *data, int64_t len, lq_err *err);
/* Copy a regular file (for tokenizer/config side files). */
lq_status lq_copy_file(const char *src, const char *dst, lq_err *err);
/* rm -rf of a directory tree we created (does not follow symlinks). */
int lq_remove_tree(const char *path);

#endif
