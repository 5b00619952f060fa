/*
 * test_debug_release.c - the header: "A build with HWT_DEBUG defined catches
 * double release." Releasing a timeout more often than it is referenced
 * logs one HWT_LOG_ERROR through the timer's log callback (a clear message
 * naming hwt_timeout_release) and is otherwise ignored: the memory is not
 * put back into the pool twice, so later timeouts do not share it and the
 * timer keeps working.
 *
 * Only meaningful in a build with the library's debug checks:
 *   cmake -S . -B build/debug -DHWT_DEBUG=ON && cmake --build build/debug
 *   ctest --test-dir build/debug -R debug_release
 * Without HWT_DEBUG (the default) the tests skip: double release is then
 * undefined behaviour, as documented.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"

#ifdef HWT_DEBUG

static hwtt_log dlog;

/* Options that log into dlog (cleared). */
static void debug_options(hwt_options *o)
{
    memset(&dlog, 0, sizeof dlog);
    hwt_options_init(o);
    o->tick_duration = 1;
    o->tick_unit = HWT_MILLISECONDS;
    o->ticks_per_wheel = 64;
    o->log = hwtt_log_cb;
    o->log_ctx = &dlog;
}

static hwt_timer *debug_timer(void)
{
    hwt_options o;
    debug_options(&o);
    return hwtt_track(hwtt_timer_opts(&o));
}

/* Waits until the worker has finished with everything scheduled so far: a
 * later timeout has run, so the earlier ones' in-flight references are gone. */
static void settle(hwt_timer *t)
{
    static hwtt_rec marker;
    memset(&marker, 0, sizeof marker);
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &marker, 2, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&marker.ran) == 1, hwtt_slack_ms(5000)));
}

/* After a caught double release the pool is intact: 2000 new timeouts get
 * distinct memory, each runs once. */
static void assert_pool_intact(hwt_timer *t, const hwt_timeout *freed)
{
    enum { N = 2000 };
    static hwtt_rec r[N];
    static hwt_timeout *h[N];
    memset(r, 0, sizeof r);
    int same_as_freed = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r[i], i % 3, HWT_MILLISECONDS, &h[i]),
                         0);
        same_as_freed += h[i] == freed;
    }
    bool all = hwtt_wait_until(({
                                   int n = 0;
                                   for (int i = 0; i < N; i++)
                                       n += atomic_load(&r[i].ran);
                                   n == N;
                               }),
                               hwtt_slack_ms(10000));
    /* distinct handles */
    int dup = 0;
    hwt_timeout **sorted = malloc(N * sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, h, N * sizeof *sorted);
    for (int i = 1; i < N; i++) { /* insertion sort on pointers: N is small */
        hwt_timeout *x = sorted[i];
        int j = i - 1;
        while (j >= 0 && (uintptr_t)sorted[j] > (uintptr_t)x) {
            sorted[j + 1] = sorted[j];
            j--;
        }
        sorted[j + 1] = x;
    }
    for (int i = 1; i < N; i++)
        dup += sorted[i] == sorted[i - 1];
    free(sorted);
    int twice = 0;
    for (int i = 0; i < N; i++) {
        twice += atomic_load(&r[i].ran) != 1;
        hwt_timeout_release(h[i]);
    }
    assert_true(all);
    assert_int_equal(dup, 0);
    assert_int_equal(twice, 0);
    assert_true(same_as_freed <= 1); /* reused once at most */
    assert_int_equal(hwt_pending_timeouts(t), 0);
}

static void test_double_release_of_a_handle(void **state)
{
    (void)state;
    hwt_timer *t = debug_timer();
    static hwtt_rec r;
    memset(&r, 0, sizeof r);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r, 0, HWT_MILLISECONDS, &h), 0);
    assert_true(hwtt_wait_until(atomic_load(&r.ran) == 1, hwtt_slack_ms(5000)));
    settle(t);
    hwt_timeout_release(h);
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 0);
    hwt_timeout_release(h); /* the bug */
    int errors = atomic_load(&dlog.count[HWT_LOG_ERROR]);
    print_message("  logged: \"%s\"\n", dlog.last);
    assert_int_equal(errors, 1);
    assert_non_null(strstr(dlog.last, "hwt_timeout_release"));
    assert_non_null(strstr(dlog.last, "released more often"));
    hwt_timeout_release(h); /* a third time: caught again */
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 2);
    assert_pool_intact(t, h);
    assert_int_equal(atomic_load(&r.ran), 1);
    hwtt_destroy(t);
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 2);
}

/* A handed-back timeout released twice, while another handed-back one
 * keeps its memory mapped. A stopped timer's pool keeps no free memory: once
 * the last timeout of a region is released the region goes back to the
 * system, and a release after that is a use after free that no build can
 * catch (as for any freed memory). */
static void test_double_release_after_stop_list(void **state)
{
    (void)state;
    hwt_timer *t = debug_timer();
    static hwtt_rec r[2];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 2; i++)
        assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[i], 1, HWT_HOURS, NULL), 0);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 2);
    hwt_timeout *victim = list[0];
    hwt_timeout_release(victim);
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 0);
    hwt_timeout_release(victim); /* the bug */
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 1);
    assert_non_null(strstr(dlog.last, "released more often"));
    hwt_timeout_release(list[1]);
    hwt_timeouts_release(list, 0); /* the array */
    hwtt_destroy(t);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(atomic_load(&r[i].ran), 0);
        assert_int_equal(atomic_load(&r[i].cb), 0);
    }
}

/* A correct program logs nothing: one reference per handle, released once. */
static void test_correct_use_logs_nothing(void **state)
{
    (void)state;
    hwt_timer *t = debug_timer();
    static hwtt_rec r[3];
    memset(r, 0, sizeof r);
    hwt_timeout *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r[0], 0, HWT_MILLISECONDS, &a), 0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[1], 1, HWT_HOURS, &b), 0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[2], 1, HWT_HOURS, &c), 0);
    assert_true(hwt_timeout_cancel(b));
    assert_true(hwtt_wait_until(atomic_load(&r[0].ran) == 1 && atomic_load(&r[1].cb) == 1,
                                hwtt_slack_ms(5000)));
    hwt_timeout_release(a);
    hwt_timeout_release(b);
    hwtt_destroy(t);
    hwt_timeout_release(c); /* after destroy: fine */
    assert_int_equal(atomic_load(&dlog.count[HWT_LOG_ERROR]), 0);
    assert_int_equal(atomic_load(&r[2].cb), 1);
}

/* Two threads release the last reference of each of RACE_N handles (the
 * task ran, the worker dropped its in-flight reference) in lockstep: one
 * release frees the timeout, the other is one too many and must log once -
 * never both free it (the memory would go into the pool twice, and two
 * later timeouts would share it). A load of 1 and a store of 0 would let
 * both through: the check needs the decrement itself. */
enum { RACE_N = 20000, RACE_ROUNDS = 10 };

static hwt_timeout *race_handles[RACE_N];
static atomic_uint race_arrived;

/* Both threads release race_handles[i] together, i = 0 .. RACE_N-1. The
 * one that leaves the meeting last is some 100 ns behind (it waits for the
 * other's write), much longer than the race's window: the first one waits a
 * little more, a different while for each i, so that some pairs meet in it. */
static void *releaser(void *arg)
{
    const bool lag = arg != NULL;
    for (unsigned i = 0; i < RACE_N; i++) {
        atomic_fetch_add(&race_arrived, 1);
        unsigned spins = 0;
        while (atomic_load(&race_arrived) < 2 * (i + 1))
            if (++spins % 1024 == 0)
                sched_yield(); /* the other thread may be off the CPU */
        if (lag)
            for (volatile unsigned k = 0; k < i % 256; k++) {
            }
        hwt_timeout_release(race_handles[i]);
    }
    return NULL;
}

static void test_concurrent_double_release_is_caught(void **state)
{
    (void)state;
    hwt_options o;
    debug_options(&o);
    /* Not tracked: if releases went into the pool twice, its depot is
     * corrupt, and a destroy would walk it. */
    hwt_timer *t = hwtt_timer_opts(&o);
    static atomic_int ran;
    atomic_store(&ran, 0);
    /* Rounds until a pair is missed, RACE_ROUNDS at most: the two threads
     * must be on the CPUs together (another job may hold one for a while). */
    int errors = 0, expected = 0;
    for (int round = 0; round < RACE_ROUNDS && errors == expected; round++) {
        /* Each handle with a pending timeout beside it in the pool, kept to
         * the end: a region whose timeouts the depot counted free twice is
         * not unmapped under the handles still to be released. */
        for (int i = 0; i < RACE_N; i++) {
            assert_int_equal(
                hwt_new_timeout(t, hwtt_count_task, &ran, 0, HWT_MILLISECONDS, &race_handles[i]),
                0);
            assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &ran, 1, HWT_HOURS, NULL), 0);
        }
        /* Each ran and the worker dropped its reference: the handle's is the last. */
        settle(t);
        for (int i = 0; i < RACE_N; i++)
            assert_int_equal(atomic_load(&race_handles[i]->refs), 1);
        assert_int_equal(atomic_load(&ran), (round + 1) * RACE_N);

        atomic_store(&race_arrived, 0);
        pthread_t a, b;
        assert_int_equal(pthread_create(&a, NULL, releaser, (void *)1), 0);
        assert_int_equal(pthread_create(&b, NULL, releaser, NULL), 0);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        expected += RACE_N;
        errors = atomic_load(&dlog.count[HWT_LOG_ERROR]);
        print_message("  round %d: %d of %d double releases caught (%d freed twice)\n", round,
                      errors, expected, expected - errors);
    }
    assert_int_equal(errors, expected);
    hwt_timer_destroy(t); /* drops the pending ones */
}
#else
static void test_skipped_without_hwt_debug(void **state)
{
    (void)state;
    print_message("  skipped: built without HWT_DEBUG (configure with -DHWT_DEBUG=ON)\n");
    skip();
}
#endif

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
#ifdef HWT_DEBUG
        cmocka_unit_test_teardown(test_double_release_of_a_handle, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_double_release_after_stop_list, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_correct_use_logs_nothing, hwtt_teardown_timers),
        cmocka_unit_test(test_concurrent_double_release_is_caught),
#else
        cmocka_unit_test(test_skipped_without_hwt_debug),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
