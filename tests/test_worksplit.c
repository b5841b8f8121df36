/* lq_split (kernels/lq_kernels_impl.h), the work split of the one-row kernels: every unit is
 * handed out exactly once whatever the thread count (a team smaller than asked for included),
 * and a slow thread's units are taken by the others, from the back of its part. The kernels' own
 * results are checked against their references in test_kernels. */
#include "lq_kernels_impl.h"
#include "lq_test.h"

#include <omp.h>
#include <time.h>

enum { NMAX = 3000 };

static void spin_us(double us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3 < us);
}

/* n units split for `ask` threads, run by tn; slow: thread 0 spends that long a unit.
 * who[u]: the thread that ran unit u (-1 none, -2 more than one), len[u] the length of its
 * run; returns the runs handed out */
static int split(int64_t n, int ask, int tn, int64_t steal, double slow, int *who, int64_t *len) {
    static lq_split sp;
    int             runs = 0, bad = 0;
    for (int64_t u = 0; u < n; u++)
        who[u] = -1;
    lq_split_init(&sp, ask, n, steal);
#pragma omp parallel num_threads(tn) reduction(+ : runs, bad)
    {
        const int th = omp_get_thread_num();
        lq_seg_it it = lq_split_iter(&sp, th, omp_get_num_threads());
        for (int64_t u0, u1; lq_seg_next(&it, &u0, &u1);) {
            runs++;
            if (u0 < 0 || u1 > n || u0 >= u1) {
                bad++;
                break;
            }
            for (int64_t u = u0; u < u1; u++) {
                int none = -1;
                if (!__atomic_compare_exchange_n(&who[u], &none, th, 0, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED)) {
                    __atomic_store_n(&who[u], -2, __ATOMIC_RELAXED);
                    bad++;
                }
                len[u] = u1 - u0;
            }
            if (th == 0 && slow > 0)
                spin_us(slow * (double)(u1 - u0));
        }
    }
    return bad ? -1 : runs;
}

/* every unit of a split run exactly once */
static void check_once(int64_t n, int ask, int tn, int64_t steal, int *who, int64_t *len) {
    const int r       = split(n, ask, tn, steal, 0., who, len);
    int       missing = 0;
    for (int64_t u = 0; u < n; u++)
        missing += who[u] < 0;
    CHECK_MSG(r >= 0 && missing == 0,
              "n %lld, split for %d threads, run by %d, steal %lld: %d runs, %d units not run once",
              (long long)n, ask, tn, (long long)steal, r, missing);
}

int main(void) {
    static int     who[NMAX];
    static int64_t len[NMAX];
    const int64_t  ns[]     = {0, 1, 2, 7, 16, 100, 1000, NMAX};
    const int      tns[]    = {1, 2, 3, 5, 8, LQ_SEG_MAX + 1}; /* the last: static parts */
    const int64_t  steals[] = {1, 4, 16};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (size_t b = 0; b < sizeof tns / sizeof *tns; b++)
            for (size_t c = 0; c < sizeof steals / sizeof *steals; c++)
                check_once(ns[a], tns[b], tns[b], steals[c], who, len);
    /* parts no thread owns (a team smaller than asked for): the others take them */
    for (int ask = 2; ask <= 9; ask += 7)
        for (int64_t n = 1; n <= 500; n += 499)
            check_once(n, ask, 1 + ask / 4, 4, who, len);
    /* thread 0 slow (200 us a unit, the others none): it keeps a front part of its own,
     * the others take the rest from its back in runs of at most `steal` */
    for (int tn = 2; tn <= 4; tn++) {
        const int64_t n = 400, steal = 4, seg = n / tn;
        const int     r    = split(n, tn, tn, steal, 200., who, len);
        int64_t       mine = 0, stolen = 0, front = 0, longest = 0;
        for (int64_t u = 0; u < seg; u++) /* (done with its own, it may take others' too) */
            if (who[u] == 0)
                mine++;
            else {
                stolen++;
                longest = len[u] > longest ? len[u] : longest;
            }
        while (front < seg && who[front] == 0)
            front++;
        CHECK_MSG(r > 0 && mine + stolen == seg && stolen > 0 && front == mine && longest <= steal,
                  "%d threads, thread 0 slow: %d runs, it kept %lld (its first %lld), %lld of %lld "
                  "taken, in runs up to %lld",
                  tn, r, (long long)mine, (long long)front, (long long)stolen, (long long)seg,
                  (long long)longest);
    }
    return lq_test_end("worksplit");
}
