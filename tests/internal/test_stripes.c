/*
 * test_stripes.c - which stripe a thread uses (stripes.c): threads are dealt
 * the stripes round-robin and keep theirs; the counters stay exact with
 * more threads than stripes scheduling and cancelling at once.
 */
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"
#include "internal.h"

#define THREADS 24
#define PER_THREAD 2000

struct worker_arg {
    hwt_timer *timer;
    pthread_barrier_t *all_started;
    unsigned stripe, stripe_at_end;
    int failures;
};

/* Notes its stripe, then schedules PER_THREAD far timeouts and cancels
 * every other one. */
static void *use_timer(void *p)
{
    struct worker_arg *a = p;
    hwt_timeout *h = NULL;
    a->stripe = hwt__stripe_index();
    pthread_barrier_wait(a->all_started);
    for (int i = 0; i < PER_THREAD; i++) {
        if (hwt_new_timeout(a->timer, hwtt_count_task, NULL, 1, HWT_HOURS, &h) != 0) {
            a->failures++;
            continue;
        }
        if (i % 2 == 0 && !hwt_timeout_cancel(h))
            a->failures++;
        hwt_timeout_release(h);
    }
    a->stripe_at_end = hwt__stripe_index();
    return NULL;
}

static void test_threads_are_dealt_stripes_round_robin(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    struct worker_arg args[THREADS];
    pthread_t th[THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, THREADS);
    /* One at a time up to the barrier's wait, so they are dealt in order. */
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct worker_arg){.timer = timer, .all_started = &barrier};
        assert_int_equal(pthread_create(&th[i], NULL, use_timer, &args[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);

    unsigned per_stripe[HWT_STRIPES] = {0};
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(args[i].failures, 0);
        assert_true(args[i].stripe < HWT_STRIPES);
        assert_int_equal(args[i].stripe_at_end, args[i].stripe); /* kept for life */
        per_stripe[args[i].stripe]++;
    }
    /* Dealt round-robin: no stripe has two threads more than another. */
    unsigned lo = THREADS, hi = 0;
    for (unsigned s = 0; s < HWT_STRIPES; s++) {
        lo = per_stripe[s] < lo ? per_stripe[s] : lo;
        hi = per_stripe[s] > hi ? per_stripe[s] : hi;
    }
    assert_true(hi - lo <= 1);

    hwt_stats st;
    hwt_timer_stats(timer, &st);
    assert_int_equal(st.scheduled, (uint64_t)THREADS * PER_THREAD);
    assert_int_equal(st.cancelled, (uint64_t)THREADS * PER_THREAD / 2);
    assert_int_equal(st.pending, (int64_t)THREADS * PER_THREAD / 2);
    assert_int_equal(hwt_pending_timeouts(timer), (int64_t)THREADS * PER_THREAD / 2);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_threads_are_dealt_stripes_round_robin,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
