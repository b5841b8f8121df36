/* llmquant: command dispatch. Quantization commands come from the library's method list
 * (lq_method_*), every other command is one row of k_cmds; options come from the options table
 * (lq_param_*). The exit code is the lq_status value. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static const cli_cmd k_cmds[] = {
    {"convert", "convert", "MODEL -o OUT_DIR [--out-dtype float16|bfloat16|float32]",
     "GGUF file (or float checkpoint) -> Hugging Face directory (safetensors, config, "
     "tokenizer).",
     1, cli_convert_flags, cmd_convert},
    {"ppl", "ppl", "MODEL_DIR --data FILE [options]",
     "Perplexity of a model directory (original or quantized) on a text file.", 1, cli_ppl_flags,
     cmd_ppl},
    {"inspect", "inspect", "MODEL_DIR [options]",
     "Describe a model directory: shapes, tensors, parameters, memory for weights and KV cache.", 1,
     cli_inspect_flags, cmd_inspect},
    {"batch", "batch", "JOBS.jsonl [--shard I/N] [--cache-dir DIR]",
     "Run a file of conversion jobs (resumable, shardable, shared calibration cache).", 1,
     cli_batch_flags, cmd_batch},
    {"exit-codes", NULL, "", "Print the table of exit codes (one per lq_status).", 0, NULL,
     cmd_exit_codes},
};
#define N_CMDS ((int)(sizeof k_cmds / sizeof k_cmds[0]))

static const char k_quant_usage[] = "MODEL_DIR -o OUT_DIR [options]";

/* A quantization method is a command of its own: one row built from the method list. */
static int method_cmd(const char *name, cli_cmd *out) {
    for (int i = 0; i < lq_method_count(); i++)
        if (!strcmp(lq_method_name(i), name)) {
            cli_cmd m = {lq_method_name(i),  lq_method_name(i), k_quant_usage, lq_method_help(i), 1,
                         cli_quantize_flags, cmd_quantize};
            *out      = m;
            return 1;
        }
    return 0;
}

static const cli_cmd *find_cmd(const char *name, cli_cmd *scratch) {
    for (int i = 0; i < N_CMDS; i++)
        if (!strcmp(k_cmds[i].name, name))
            return &k_cmds[i];
    return method_cmd(name, scratch) ? scratch : NULL;
}

static void print_usage(FILE *f) {
    fprintf(f,
            "llmquant %s -- post-training quantization for LLMs (GPTQ, AWQ, NF4, LLM.int8,\n"
            "RTN) writing checkpoints that load unchanged in transformers and vLLM.\n\n"
            "usage: llmquant COMMAND [ARGS] [options]\n"
            "       llmquant COMMAND --help\n\n"
            "Quantize (llmquant METHOD %s):\n",
            lq_version_string(), k_quant_usage);
    for (int i = 0; i < lq_method_count(); i++)
        fprintf(f, "  %-11s %s\n", lq_method_name(i), lq_method_help(i));
    fprintf(f, "\nOther commands:\n");
    for (int i = 0; i < N_CMDS; i++)
        fprintf(f, "  %-11s %s\n", k_cmds[i].name, k_cmds[i].summary);
    fprintf(f, "\nGlobal flags: -q/--quiet, --json, -v/--verbose, -h/--help, --version\n"
               "Exit code: the lq_status value, 0 = success (`llmquant exit-codes`).\n");
}

static int print_version(void) {
    /* asked of the library, not of this program's build flags: it is what computes */
    int ndev = 0;
    if (lq_cuda_device_count(&ndev) != LQ_OK)
        ndev = 0;
    printf("llmquant %s (library %s, CUDA: %s, CUDA devices: %d, OpenBLAS kernels: %s)\n",
           LQ_VERSION_STRING, lq_version_string(), lq_cuda_built() ? "yes" : "no", ndev,
           lq_blas_coretype());
    return 0;
}

/* stdout may be a full disk or a closed pipe: the exit code must say so. */
static int finish(cli_ctx *c, int rc) {
    if (fflush(stdout) != 0 && rc == 0)
        rc = cli_error(c, LQ_ERR_IO, "cannot write to standard output");
    return rc;
}

int main(int argc, char **argv) {
#if defined(__GLIBC__)
    /* Layer-sized buffers come and go once per layer. glibc's dynamic mmap threshold moves them
     * onto the brk heap after the first free, where fragmentation kept each layer's freed
     * packed outputs resident (+76..112 MiB of RSS per layer at hidden 4096, which broke
     * --max-memory). A fixed threshold keeps every buffer of 4 MiB or more in a mapping of its
     * own that free() returns to the system. */
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
    /* OpenBLAS fell back to kernels below what this CPU runs (see lq_blas_better_coretype): the
     * choice is made when it loads, so start again, once, with it named. The variable is then
     * set, so the new process does not come back here; if exec fails, go on as we are. */
    const char *core = lq_blas_better_coretype();
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
        execv("/proc/self/exe", argv);
        unsetenv("OPENBLAS_CORETYPE");
    }
    /* not a command: the second half of the SIGBUS handler (cli_out.c), same pid */
    if (argc == 3 && !strcmp(argv[1], "__discard-output")) {
        lq_output_discard(argv[2]);
        return LQ_ERR_IO;
    }
    cli_ctx c = {0};
    c.tty     = isatty(STDERR_FILENO);
    int i     = 1;
    /* Global flags may precede the command. */
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            return finish(&c, 0);
        }
        if (!strcmp(a, "--version") || !strcmp(a, "-V"))
            return finish(&c, print_version());
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q"))
            c.quiet = 1;
        else if (!strcmp(a, "--json"))
            c.json = 1;
        else if (!strcmp(a, "--verbose") || !strcmp(a, "-v"))
            c.verbose = 1;
        else
            return cli_error(&c, LQ_ERR_INVALID_ARG,
                             "unknown option %s before the command "
                             "(see llmquant --help)",
                             a);
    }
    if (i >= argc) {
        print_usage(stderr);
        return LQ_ERR_INVALID_ARG;
    }
    const char *name = argv[i];
    if (!strcmp(name, "help")) {
        /* "llmquant help [COMMAND]" */
        cli_cmd        scratch;
        const cli_cmd *cmd = i + 1 < argc ? find_cmd(argv[i + 1], &scratch) : NULL;
        if (cmd)
            cli_print_cmd_help(cmd, stdout);
        else
            print_usage(stdout);
        return finish(&c, 0);
    }
    cli_cmd        scratch;
    const cli_cmd *cmd = find_cmd(name, &scratch);
    if (!cmd) {
        const char *cands[64];
        int         n = 0;
        for (int k = 0; k < N_CMDS; k++)
            cands[n++] = k_cmds[k].name;
        for (int k = 0; k < lq_method_count() && n < 64; k++)
            cands[n++] = lq_method_name(k);
        const char *s = cli_suggest(name, cands, n);
        if (s)
            return cli_error(&c, LQ_ERR_INVALID_ARG,
                             "unknown command \"%s\" (did you mean %s? see llmquant --help)", name,
                             s);
        return cli_error(&c, LQ_ERR_INVALID_ARG, "unknown command \"%s\" (see llmquant --help)",
                         name);
    }
    c.cmd      = cmd->name;
    cli_args a = {0};
    a.params   = lq_params_create();
    if (!a.params)
        return cli_error(&c, LQ_ERR_NOMEM, "out of memory");
    int want_help = 0;
    int rc        = cli_parse_args(&c, cmd, argc - i - 1, argv + i + 1, &a, &want_help);
    if (rc == 0 && want_help) {
        cli_print_cmd_help(cmd, stdout);
    } else if (rc == 0) {
        c.human = c.json ? stderr : stdout;
        rc      = cmd->run(&c, cmd, &a);
    }
    lq_params_free(a.params);
    return finish(&c, rc);
}
