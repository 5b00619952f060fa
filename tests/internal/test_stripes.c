/*
 * test_stripes.c - which stripe a thread uses (stripes.c): the first
 * HWT_OWNED_STRIPES threads own one each and count without locked adds,
 * further threads share the rest; an exiting owner gives its stripe back;
 * the counters stay exact through all of it. Owners announce a schedule
 * without a locked add where membarrier works (fences.c; the stop races of
 * test_stress prove the stop still waits for them).
 */
#include <pthread.h>
#include <stdlib.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "helpers.h"
#include "internal.h"

#define THREADS 24
#define PER_THREAD 2000

struct worker_arg {
    hwt_timer *timer;
    pthread_barrier_t *all_started; /* NULL: do not wait for the others */
    unsigned stripe;
    bool owned;
    int failures;
};

/* Schedules PER_THREAD far timeouts and cancels every other one; notes the
 * stripe it got. */
static void *use_timer(void *p)
{
    struct worker_arg *a = p;
    hwt_timeout *h = NULL;
    for (int i = 0; i < PER_THREAD; i++) {
        if (hwt_new_timeout(a->timer, hwtt_count_task, NULL, 1, HWT_HOURS, &h) != 0) {
            a->failures++;
            continue;
        }
        if (i % 2 == 0 && !hwt_timeout_cancel(h))
            a->failures++;
        hwt_timeout_release(h);
    }
    a->stripe = hwt__stripe_index();
    a->owned = hwt__stripe_owned;
    if (a->all_started != NULL) /* keep every stripe taken until all have one */
        pthread_barrier_wait(a->all_started);
    return NULL;
}

static void run_threads(hwt_timer *timer, int n, bool together, struct worker_arg *args)
{
    pthread_t th[THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        args[i] = (struct worker_arg){.timer = timer, .all_started = together ? &barrier : NULL};
        assert_int_equal(pthread_create(&th[i], NULL, use_timer, &args[i]), 0);
        if (!together)
            pthread_join(th[i], NULL);
    }
    if (together)
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
}

static void expect_counts(hwt_timer *timer, int threads)
{
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    assert_int_equal(st.scheduled, (uint64_t)threads * PER_THREAD);
    assert_int_equal(st.cancelled, (uint64_t)threads * PER_THREAD / 2);
    assert_int_equal(st.pending, (int64_t)threads * PER_THREAD / 2);
    assert_int_equal(hwt_pending_timeouts(timer), (int64_t)threads * PER_THREAD / 2);
}

static void test_owners_then_sharers(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    struct worker_arg args[THREADS];
    run_threads(timer, THREADS, true, args);
    int owners = 0;
    bool taken[HWT_STRIPES] = {false};
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(args[i].failures, 0);
        assert_true(args[i].stripe < HWT_STRIPES);
        if (args[i].owned) {
            owners++;
            assert_true(args[i].stripe < HWT_OWNED_STRIPES);
            assert_false(taken[args[i].stripe]); /* owned alone */
            taken[args[i].stripe] = true;
        } else {
            assert_true(args[i].stripe >= HWT_OWNED_STRIPES);
        }
    }
    /* The test's main thread may hold one owned stripe too. */
    int free_for_threads = HWT_OWNED_STRIPES - (hwt__stripe_owned ? 1 : 0);
    assert_int_equal(owners, free_for_threads);
    expect_counts(timer, THREADS);
    hwtt_destroy(timer);
}

/* One thread after another: each finds the stripe its predecessor gave back
 * (so owners never run out), and counts on from its last store. */
static void test_exiting_owner_gives_its_stripe_back(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    struct worker_arg args[THREADS];
    run_threads(timer, THREADS, false, args);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(args[i].failures, 0);
        assert_true(args[i].owned);
        assert_int_equal(args[i].stripe, args[0].stripe);
    }
    expect_counts(timer, THREADS);
    hwtt_destroy(timer);
}

/* Where the kernel offers private expedited membarrier, creating a timer
 * turns the light announcements on. */
static void test_light_fences_where_membarrier_works(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
#if defined(__linux__) && defined(SYS_membarrier)
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) {
        print_message("  membarrier unavailable here (%ld): locked adds\n", cmds);
        assert_false(atomic_load(&hwt__light_fences));
    } else {
        assert_true(atomic_load(&hwt__light_fences));
    }
#else
    assert_false(atomic_load(&hwt__light_fences));
#endif
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_owners_then_sharers, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_exiting_owner_gives_its_stripe_back, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_light_fences_where_membarrier_works, hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
