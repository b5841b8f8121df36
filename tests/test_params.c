/* The options table (lq_param_*) and lq_params: parsing, bounds, booleans, sizes, choices,
 * unknown keys, applicability, and the table's own invariants (every default must parse). */
#include "lq_methods.h"
#include "lq_opts.h"
#include "lq_test.h"

#include <ctype.h>

static lq_status set(lq_params *p, const char *k, const char *v, lq_err *e) {
    return lq_params_set(p, k, v, e);
}

/* Whether the comma list holds the word s[0, n). */
static int has_word(const char *list, const char *s, size_t n) {
    for (const char *m = list; m && *m;) {
        const char  *comma = strchr(m, ',');
        const size_t ml    = comma ? (size_t)(comma - m) : strlen(m);
        if (ml == n && !strncmp(m, s, n))
            return 1;
        m = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* Families an option may name: those some method declares, the other commands and "*"; a typo
 * in either table would silently hide an option. */
static int known_family(const char *s, size_t n) {
    if (has_word("ppl,inspect,convert,*", s, n))
        return 1;
    for (int i = 0; i < lq_method_count(); i++)
        if (has_word(lq_method_traits_get(i)->options, s, n))
            return 1;
    return 0;
}

/* Every family a method declares is some option's (else the row names a family by mistake). */
static void check_method_families(void) {
    for (int i = 0; i < lq_method_count(); i++) {
        const char *o = lq_method_traits_get(i)->options;
        CHECK_MSG(o && *o, "method %s declares no options", lq_method_name(i));
        for (const char *m = o; m && *m;) {
            const char  *comma = strchr(m, ',');
            const size_t ml    = comma ? (size_t)(comma - m) : strlen(m);
            int          used  = 0;
            for (int j = 0; j < lq_param_count(); j++)
                used |= has_word(lq_param_get_info(j)->families, m, ml);
            CHECK_MSG(used, "method %s: family \"%.*s\" is no option's", lq_method_name(i),
                      (int)ml, m);
            m = comma ? comma + 1 : NULL;
        }
    }
}

static void check_table(void) {
    int n = lq_param_count();
    CHECK(n > 10);
    CHECK(lq_param_get_info(-1) == NULL);
    CHECK(lq_param_get_info(n) == NULL);
    for (int i = 0; i < n; i++) {
        const lq_param_info *pi = lq_param_get_info(i);
        CHECK(pi && pi->name && *pi->name);
        for (const char *c = pi->name; *c; c++)
            CHECK_MSG(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_',
                      "option %s: not snake_case", pi->name);
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(lq_param_get_info(j)->name, pi->name) != 0, "duplicate option %s",
                      pi->name);
        CHECK(lq_param_find(pi->name) == pi);
        CHECK_MSG(pi->type >= LQ_PT_INT && pi->type <= LQ_PT_SIZE, "option %s: type %d",
                  pi->name, pi->type);
        CHECK_MSG(pi->help && strlen(pi->help) > 5, "option %s: no help", pi->name);
        CHECK_MSG(pi->min <= pi->max, "option %s: min > max", pi->name);
        CHECK_MSG(pi->families && *pi->families, "option %s: no families", pi->name);
        for (const char *m = pi->families; m && *m;) {
            const char *comma = strchr(m, ',');
            size_t      ml    = comma ? (size_t)(comma - m) : strlen(m);
            CHECK_MSG(known_family(m, ml), "option %s: unknown family \"%.*s\"", pi->name,
                      (int)ml, m);
            m = comma ? comma + 1 : NULL;
        }
        char cmds[256];
        CHECK_MSG(lq_param_commands(pi, cmds, sizeof cmds) > 0 && *cmds,
                  "option %s applies to no command", pi->name);
        CHECK_MSG(pi->choices == NULL || pi->type == LQ_PT_STR, "option %s: choices on non-str",
                  pi->name);
        /* The default must be a value the option accepts ("" = unset). */
        if (pi->def && *pi->def) {
            lq_params *p = lq_params_create();
            lq_err     e = {0};
            CHECK_MSG(set(p, pi->name, pi->def, &e) == LQ_OK, "option %s: default \"%s\": %s",
                      pi->name, pi->def, e.msg);
            lq_params_free(p);
        }
    }
}

/* The typed view the library reads (lq_opts_read), taken fresh after each set. */
static lq_opts opts_of(const lq_params *p) {
    lq_opts o;
    lq_opts_read(p, &o);
    return o;
}

static void check_ints(void) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    CHECK(p != NULL);
    CHECK(opts_of(p).set.bits == 0);
    CHECK(strcmp(lq_params_get(p, "bits"), "4") == 0); /* default */
    CHECK_EQ_INT(opts_of(p).group_size, 128);
    CHECK_EQ_INT(set(p, "bits", "8", &e), LQ_OK);
    CHECK(opts_of(p).set.bits == 1);
    CHECK_EQ_INT(opts_of(p).bits, 8);
    CHECK_EQ_INT(set(p, "bits", "3", &e), LQ_OK); /* last value wins */
    CHECK_EQ_INT(opts_of(p).bits, 3);
    /* bounds are inclusive: 2..8 */
    CHECK_EQ_INT(set(p, "bits", "2", &e), LQ_OK);
    CHECK_EQ_INT(set(p, "bits", "1", &e), LQ_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "bits") && strstr(e.msg, "outside"));
    CHECK_EQ_INT(set(p, "bits", "9", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(opts_of(p).bits, 2); /* a failed set keeps the old value */
    CHECK_EQ_INT(set(p, "bits", "4.5", &e), LQ_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "not an integer") != NULL);
    CHECK_EQ_INT(set(p, "bits", "4x", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "bits", "", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "bits", "0x4", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "seed", "99999999999999999999999", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "group_size", "-1", &e), LQ_OK);
    CHECK_EQ_INT(opts_of(p).group_size, -1);
    CHECK_EQ_INT(set(p, "group_size", "-2", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "seed", "4294967295", &e), LQ_OK);
    CHECK_EQ_INT(opts_of(p).seed, 4294967295ll);
    CHECK_EQ_INT(set(p, "seed", "4294967296", &e), LQ_ERR_INVALID_ARG);
    lq_params_free(p);
}

static void check_floats_bools(void) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    CHECK_NEAR(opts_of(p).damp, 0.01, 0);
    CHECK_EQ_INT(set(p, "damp", "0.05", &e), LQ_OK);
    CHECK_NEAR(opts_of(p).damp, 0.05, 0);
    CHECK_EQ_INT(set(p, "damp", "1e-3", &e), LQ_OK);
    CHECK_NEAR(opts_of(p).damp, 0.001, 0);
    CHECK_EQ_INT(set(p, "damp", "1.5", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "damp", "nan", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "damp", "inf", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "damp", "abc", &e), LQ_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "not a number") != NULL);
    /* an unset float with an empty default reads as 0 and is not "set" */
    CHECK(strcmp(lq_params_get(p, "max_ppl_increase"), "") == 0);
    CHECK(!opts_of(p).set.max_ppl_increase);

    static const char *const yes[] = {"1", "true", "TRUE", "yes", "on", "On"};
    static const char *const no[]  = {"0", "false", "False", "no", "off", "OFF"};
    CHECK_EQ_INT(opts_of(p).sym, 1);      /* default true */
    CHECK_EQ_INT(opts_of(p).desc_act, 0); /* default false */
    for (size_t i = 0; i < 6; i++) {
        CHECK_EQ_INT(set(p, "desc_act", yes[i], &e), LQ_OK);
        CHECK_MSG(opts_of(p).desc_act == 1, "\"%s\" should be true", yes[i]);
        CHECK_EQ_INT(set(p, "desc_act", no[i], &e), LQ_OK);
        CHECK_MSG(opts_of(p).desc_act == 0, "\"%s\" should be false", no[i]);
    }
    CHECK_EQ_INT(set(p, "sym", "maybe", &e), LQ_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "sym") && strstr(e.msg, "true/false"));
    CHECK_EQ_INT(set(p, "sym", "", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "sym", "2", &e), LQ_ERR_INVALID_ARG);
    lq_params_free(p);
}

static void check_sizes_choices(void) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    CHECK_EQ_INT(opts_of(p).max_shard_size, 5ll << 30); /* default "5G" */
    CHECK_EQ_INT(opts_of(p).max_memory, 0);             /* unset */
    static const struct {
        const char *s;
        long long   v;
    } ok[] = {{"512", 512},
              {"512B", 512},
              {"64K", 64ll << 10},
              {"64k", 64ll << 10},
              {"64KiB", 64ll << 10},
              {"8M", 8ll << 20},
              {"64MiB", 64ll << 20},
              {"8GB", 8ll << 30},
              {"1.5G", 3ll << 29},
              {"2T", 2ll << 40},
              {"1e3", 1000}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK_MSG(set(p, "max_memory", ok[i].s, &e) == LQ_OK, "size \"%s\": %s", ok[i].s, e.msg);
        CHECK_MSG(opts_of(p).max_memory == ok[i].v, "size \"%s\" = %lld, want %lld",
                  ok[i].s, (long long)opts_of(p).max_memory, ok[i].v);
    }
    static const char *const bad[] = {"12X", "-1M", "M", "", "8GBB", "1.2.3G", "8 Gx"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(set(p, "max_memory", bad[i], &e) == LQ_ERR_INVALID_ARG, "size \"%s\" accepted",
                  bad[i]);
    }
    CHECK(strstr(e.msg, "max_memory") != NULL);
    CHECK_EQ_INT(set(p, "max_shard_size", "0", &e), LQ_ERR_INVALID_ARG); /* min 1 byte */

    CHECK(strcmp(lq_params_get(p, "device"), "auto") == 0);
    CHECK_EQ_INT(set(p, "device", "cuda", &e), LQ_OK);
    CHECK(strcmp(lq_params_get(p, "device"), "cuda") == 0);
    CHECK_EQ_INT(set(p, "device", "cpu", &e), LQ_OK);
    CHECK_EQ_INT(set(p, "device", "gpu", &e), LQ_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "auto|cpu|cuda") != NULL);
    CHECK_EQ_INT(set(p, "device", "cud", &e), LQ_ERR_INVALID_ARG); /* prefix is not a choice */
    CHECK_EQ_INT(set(p, "device", "cudaa", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "device", "", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "protocol", "llamacpp", &e), LQ_OK);
    /* free text is kept verbatim */
    CHECK_EQ_INT(set(p, "calib", "/data/c4 sample.jsonl.zst", &e), LQ_OK);
    CHECK(strcmp(lq_params_get(p, "calib"), "/data/c4 sample.jsonl.zst") == 0);
    lq_params_free(p);
}

static void check_unknown_and_applies(void) {
    lq_params *p = lq_params_create();
    lq_err     e = {0};
    CHECK_EQ_INT(set(p, "group-size", "128", &e), LQ_ERR_INVALID_ARG); /* keys use '_' */
    CHECK(strstr(e.msg, "unknown option") && strstr(e.msg, "group-size"));
    CHECK_EQ_INT(set(p, "nonexistent", "1", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, NULL, "1", &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(p, "bits", NULL, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(set(NULL, "bits", "4", &e), LQ_ERR_INVALID_ARG);
    CHECK(lq_params_get(p, "nonexistent") == NULL);
    CHECK(lq_params_get(p, NULL) == NULL);
    CHECK(lq_param_find("nonexistent") == NULL);
    CHECK(lq_param_find(NULL) == NULL);
    CHECK(strcmp(lq_params_get(NULL, "bits"), "4") == 0); /* NULL params: defaults */
    lq_params_free(p);
    lq_params_free(NULL);

    const lq_param_info *bits = lq_param_find("bits");
    CHECK(lq_param_applies(bits, "gptq"));
    CHECK(lq_param_applies(bits, "rtn"));
    CHECK(!lq_param_applies(bits, "nf4"));
    CHECK(!lq_param_applies(bits, "gpt")); /* whole names only */
    CHECK(!lq_param_applies(bits, "gptqx"));
    CHECK(!lq_param_applies(bits, ""));
    CHECK(!lq_param_applies(bits, NULL));
    CHECK(!lq_param_applies(NULL, "gptq"));
    const lq_param_info *dev = lq_param_find("device");
    CHECK(lq_param_applies(dev, "inspect") && lq_param_applies(dev, "anything"));
    const lq_param_info *ctx = lq_param_find("ctx");
    CHECK(lq_param_applies(ctx, "ppl") && lq_param_applies(ctx, "inspect"));
    CHECK(lq_param_applies(lq_param_find("batch"), "inspect"));
    CHECK(!lq_param_applies(lq_param_find("batch"), "gptq"));
    CHECK(lq_param_applies(lq_param_find("threshold"), "int8"));
    CHECK(!lq_param_applies(lq_param_find("threshold"), "nf4"));
    CHECK(!lq_param_applies(bits, "group")); /* a family is not a command */
    CHECK(!lq_param_applies(lq_param_find("nsamples"), "calib"));
    /* the commands each option applies to, from the two tables */
    static const char *const want[][2] = {
        {"bits", "rtn,gptq,awq"},
        {"group_size", "rtn,gptq,awq,inspect"},
        {"sym", "rtn,gptq"},
        {"desc_act", "gptq"},
        {"awq_grid", "gptq,awq"},
        {"awq_clip", "awq"},
        {"nsamples", "gptq,awq,int8"},
        {"max_memory", "gptq,awq,int8,ppl"},
        {"force", "rtn,gptq,awq,nf4,int8,convert"},
        {"ctx", "rtn,gptq,awq,nf4,int8,ppl,inspect"},
        {"device", "*"},
        {"batch", "inspect"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char         got[256];
        const size_t len = lq_param_commands(lq_param_find(want[i][0]), got, sizeof got);
        CHECK_MSG(!strcmp(got, want[i][1]) && len == strlen(want[i][1]),
                  "%s applies to %s, want %s", want[i][0], got, want[i][1]);
    }
    char small[8]; /* truncated, still terminated, and the length it needed */
    CHECK(lq_param_commands(lq_param_find("ctx"), small, sizeof small) == strlen(
        "rtn,gptq,awq,nf4,int8,ppl,inspect") && strlen(small) == sizeof small - 1);
}

int main(void) {
    check_table();
    check_method_families();
    check_ints();
    check_floats_bools();
    check_sizes_choices();
    check_unknown_and_applies();
    return lq_test_end("params");
}
