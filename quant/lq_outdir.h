/* lq_outdir.h -- all-or-nothing output directories: everything is written into a hidden sibling
 * temporary directory which is renamed onto the final name only when complete, so a crash, a
 * kill, ENOSPC or a failed check never leaves a half-written checkpoint under the final name. */
#ifndef LQ_OUTDIR_H
#define LQ_OUTDIR_H

#include "lq_base.h"
#include "lq_source.h"

typedef struct lq_outdir {
    char final_path[4096];
    char tmp_path[4096];
    int  committed;
} lq_outdir;

/* Fails with LQ_ERR_EXISTS if final_path exists and !force; LQ_ERR_NOT_FOUND if its parent is
 * missing. Stale temporaries of dead processes next to it are removed. */
lq_status lq_outdir_begin(lq_outdir *o, const char *final_path, int force, lq_err *err);
/* Path of a file inside the temporary directory. */
lq_status lq_outdir_path(const lq_outdir *o, const char *name, char *buf, size_t cap, lq_err *err);
/* fsync the files and directory, replace an existing final dir (force), rename into place. */
lq_status lq_outdir_commit(lq_outdir *o, lq_err *err);
/* Remove the temporary directory (no-op after commit). */
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
