/*
 * test_deadline_clock.c - the clock deadlines are computed from
 * (deadline_clock.c): read between two CLOCK_MONOTONIC reads on the same
 * thread, it is never behind the first and at most a few microseconds ahead
 * of the second, on several threads at once, before and after it has
 * measured the TSC's rate; where the TSC is invariant it does use it, and
 * its self-check never found it behind.
 */
#include <pthread.h>
#include <stdlib.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "helpers.h"
#include "internal.h"

/* The estimate's lead: a 250 ns margin, the rate's bound over a 250 us
 * anchor (~0.3 us), the anchor's own bracket (< 1 us); generously. */
#define LEAD_MAX_NS 20000
/* Reads per thread after the TSC is in use: several anchors' lives. */
#define RUN_NS (300 * INT64_C(1000000))

struct reader {
    pthread_t thread;
    int64_t until_ns; /* stops reading then, or RUN_NS after the TSC is in use */
    uint64_t reads, tsc_reads;
    uint64_t behind, too_far_ahead;
    int64_t worst_behind, worst_lead;
};

static void *read_clocks(void *p)
{
    struct reader *r = p;
    int64_t tsc_since = 0;
    for (;;) {
        int64_t before = hwt__now_ns();
        bool tsc = hwt__deadline_clock_uses_tsc();
        int64_t d = hwt__deadline_now_ns();
        int64_t after = hwt__now_ns();
        r->reads++;
        if (tsc) {
            r->tsc_reads++;
            if (tsc_since == 0)
                tsc_since = after;
        }
        if (d < before) {
            r->behind++;
            if (before - d > r->worst_behind)
                r->worst_behind = before - d;
        }
        if (d - after > LEAD_MAX_NS)
            r->too_far_ahead++;
        if (d - after > r->worst_lead)
            r->worst_lead = d - after;
        if (after > r->until_ns || (tsc_since != 0 && after - tsc_since > RUN_NS))
            return NULL;
        if (r->reads % 64 == 0)
            hwtt_sleep_us(20); /* let anchors age, as between a server's schedules */
    }
}

/* What the library checks too: an x86-64 CPU whose TSC is invariant. */
static bool invariant_tsc(void)
{
#if defined(__x86_64__)
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) && (edx & (1u << 8));
#else
    return false;
#endif
}

static void test_never_behind_the_monotonic_clock(void **state)
{
    (void)state;
    enum { THREADS = 3 };
    struct reader readers[THREADS] = {0};
    /* Until the TSC is calibrated and in use for RUN_NS; without an
     * invariant TSC (other architectures) it never is: RUN_NS of reads. */
    int64_t window_ns = invariant_tsc() ? hwtt_slack_ms(3000) * INT64_C(1000000) : RUN_NS;
    int64_t until = hwtt_now_ns() + window_ns;
    for (int i = 0; i < THREADS; i++) {
        readers[i].until_ns = until;
        assert_int_equal(pthread_create(&readers[i].thread, NULL, read_clocks, &readers[i]), 0);
    }
    uint64_t reads = 0, tsc_reads = 0, behind = 0, too_far_ahead = 0;
    int64_t worst_behind = 0, worst_lead = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(readers[i].thread, NULL), 0);
        reads += readers[i].reads;
        tsc_reads += readers[i].tsc_reads;
        behind += readers[i].behind;
        too_far_ahead += readers[i].too_far_ahead;
        if (readers[i].worst_behind > worst_behind)
            worst_behind = readers[i].worst_behind;
        if (readers[i].worst_lead > worst_lead)
            worst_lead = readers[i].worst_lead;
    }
    if (behind != 0 || too_far_ahead != 0)
        fail_msg("%llu of %llu reads behind CLOCK_MONOTONIC (worst %lld ns), %llu more than "
                 "%d ns ahead (worst %lld ns)",
                 (unsigned long long)behind, (unsigned long long)reads, (long long)worst_behind,
                 (unsigned long long)too_far_ahead, LEAD_MAX_NS, (long long)worst_lead);
    /* Valgrind runs too slowly for a tight bracket: it may never calibrate. */
    if (invariant_tsc() && !hwtt_under_valgrind()) {
        assert_true(hwt__deadline_clock_uses_tsc()); /* the self-check never tripped */
        assert_true(tsc_reads > 1000);
    }
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_never_behind_the_monotonic_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
