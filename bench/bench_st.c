/* Safetensors writer/reader at checkpoint scale: streams `mb` MB of fp16 tensors (generated one
 * layer at a time, like the quantization driver produces them) into shards of `shard_mb` MB,
 * then maps the result and converts every tensor to float32.
 *   bench_st [mb=1024] [shard_mb=256] [dir=/tmp]
 * Reports throughput and the resident-memory growth of each phase: the writer's must stay a
 * small constant (one tensor in flight), not the model size. */
#include "lq_st.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int64_t     mb       = argc > 1 ? atoll(argv[1]) : 1024;
    int64_t     shard_mb = argc > 2 ? atoll(argv[2]) : 256;
    const char *base     = argc > 3 ? argv[3] : "/tmp";
    char        dir[4096];
    snprintf(dir, sizeof dir, "%s/bench_st_%ld", base, (long)getpid());
    if (mkdir(dir, 0755) != 0) {
        perror(dir);
        return 1;
    }
    /* a layer = 7 matrices of n x n (q k v o gate up down at hidden n, intermediate n) */
    const int64_t n         = 2048;
    const int64_t per_layer = 7 * n * n * 2;
    int64_t       layers    = (mb << 20) / per_layer;
    if (layers < 1)
        layers = 1;
    float *w = malloc((size_t)(n * n) * sizeof *w);
    for (int64_t i = 0; i < n * n; i++)
        w[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;

    lq_err        err = {0};
    lq_st_writer *wr  = NULL;
    int64_t       rss0 = lq_cur_rss_bytes();
    double        t0   = lq_now();
    if (lq_st_writer_create(dir, shard_mb << 20, &wr, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    lq_st_writer_set_metadata(wr, "format", "pt", &err);
    int64_t rss_peak_add = 0;
    for (int64_t l = 0; l < layers; l++)
        for (int k = 0; k < 7; k++) {
            static const char *nm[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                        "mlp.down_proj"};
            char    name[128];
            int64_t shape[2] = {n, n};
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, nm[k]);
            w[0] = (float)(l * 7 + k); /* distinct tensors */
            if (lq_st_writer_add_f32(wr, name, LQ_DT_F16, 2, shape, w, &err) != LQ_OK)
                return fprintf(stderr, "%s\n", err.msg), 1;
            int64_t r = lq_cur_rss_bytes() - rss0;
            rss_peak_add = r > rss_peak_add ? r : rss_peak_add;
        }
    double t1 = lq_now();
    if (lq_st_writer_finish(wr, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    double t2 = lq_now();
    lq_st_writer_free(wr);
    double total_mb = (double)(layers * per_layer) / (1 << 20);
    printf("write: %lld layers, %.0f MB fp16 in %lld MB shards\n", (long long)layers, total_mb,
           (long long)shard_mb);
    printf("  add (convert f32->f16 + spill): %.2f s, %.0f MB/s\n", t1 - t0, total_mb / (t1 - t0));
    printf("  finish (headers + copy + fsync): %.2f s, %.0f MB/s\n", t2 - t1, total_mb / (t2 - t1));
    printf("  resident growth while adding: %.1f MB (input buffer %.0f MB excluded)\n",
           (double)rss_peak_add / (1 << 20), (double)(n * n * 4) / (1 << 20));

    lq_st *st = NULL;
    double t3 = lq_now();
    if (lq_st_open_dir(dir, &st, &err) != LQ_OK)
        return fprintf(stderr, "%s\n", err.msg), 1;
    double t4 = lq_now();
    for (int64_t i = 0; i < lq_st_count(st); i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        if (lq_st_read_f32(st, t->name, t->ndim, t->shape, w, &err) != LQ_OK)
            return fprintf(stderr, "%s\n", err.msg), 1;
    }
    double t5 = lq_now();
    printf("read: open + validate %lld tensors %.3f s; f16->f32 of all %.2f s, %.0f MB/s\n",
           (long long)lq_st_count(st), t4 - t3, t5 - t4, total_mb / (t5 - t4));
    lq_st_close(st);
    free(w);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
