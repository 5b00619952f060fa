/*
 * test_reuse.c - a cancelled timeout still queued, whose handle its thread
 * released, is revived by that thread's next schedule on the timer
 * (timeout.c, "Reuse"): the request-timeout pattern reuses its memory
 * instead of taking new. What may be kept (the thread's latest, no
 * cancelled callback owed, a handle to return it through), that the
 * thread's order holds, what is counted (scheduled, pending), and
 * the two races with the worker, each forced with the step hook (steps.h)
 * pausing the schedule between its count and its CAS: the worker letting
 * go of the kept timeout first, and a stop's final drain. A thread that
 * exits, or turns to a stopped timer, lets go of what it keeps (the
 * sanitizers' leak checks would see a timeout never freed, and with it the
 * timer). Every wait has a deadline.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"
#include "steps.h"

/* ------------------------------------------------------------ the gate */

/* One gate, at HWT_STEP_SCHEDULE_REVIVING of one timer: the first schedule
 * to reach it waits until the test opens it. */
static _Atomic(void *) gate_timer;
static atomic_bool gate_armed, gate_reached, gate_open;

static void step_hook(hwt__step step, void *timer)
{
    if (step != HWT_STEP_SCHEDULE_REVIVING || atomic_load(&gate_timer) != timer ||
        !atomic_exchange(&gate_armed, false))
        return;
    atomic_store(&gate_reached, true);
    int64_t deadline = hwtt_now_ns() + INT64_C(30) * 1000000000;
    while (!atomic_load(&gate_open) && hwtt_now_ns() < deadline)
        hwtt_sleep_us(100);
}

static void arm_gate(hwt_timer *timer)
{
    atomic_store(&gate_reached, false);
    atomic_store(&gate_open, false);
    atomic_store(&gate_timer, timer);
    atomic_store(&gate_armed, true);
}

static int setup(void **state)
{
    (void)state;
    atomic_store(&gate_armed, false);
    hwt__set_step_hook(step_hook);
    return 0;
}

static int teardown(void **state)
{
    atomic_store(&gate_open, true);
    hwt__set_step_hook(NULL);
    return hwtt_teardown_timers(state);
}

/* ------------------------------------------------------------- helpers */

struct ran {
    atomic_int count;
    _Atomic int64_t at_ns;
};

static void note_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct ran *r = arg;
    atomic_store(&r->at_ns, hwtt_now_ns());
    atomic_fetch_add(&r->count, 1);
}

static void note_cancel(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static uint64_t revived(hwt_timer *timer)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        n += atomic_load(&timer->stripes[i].revived);
    return n;
}

/* Schedules an hour away, cancels and releases: the calling thread keeps
 * it (it has a cache of the timer: it scheduled). */
static hwt_timeout *schedule_cancel_release(hwt_timer *timer, struct ran *r)
{
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, note_run, r, 1, HWT_HOURS, &t), 0);
    assert_true(hwt_timeout_cancel(t));
    hwt_timeout_release(t);
    return t;
}

/* ---------------------------------------------------------- the pattern */

static void test_the_next_schedule_revives_a_released_cancelled_timeout(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct ran first = {0}, second = {0};
    hwt_timeout *old = schedule_cancel_release(timer, &first);

    int64_t t0 = hwtt_now_ns();
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, note_run, &second, 20, HWT_MILLISECONDS, &t), 0);
    assert_ptr_equal(t, old); /* the same memory, revived where it was queued */
    assert_int_equal(revived(timer), 1);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_false(hwt_timeout_is_cancelled(t));

    assert_true(hwtt_wait_until(atomic_load(&second.count) == 1, hwtt_slack_ms(5000)));
    assert_true(atomic_load(&second.at_ns) - t0 >= 20 * 1000000); /* never early */
    assert_true(hwt_timeout_is_expired(t));
    assert_int_equal(atomic_load(&first.count), 0);

    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, 2);
    assert_int_equal(s.cancelled, 1);
    assert_int_equal(s.expired, 1);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_timeout_release(t);
    hwtt_sleep_ms(5);
    assert_int_equal(atomic_load(&second.count), 1); /* once */
    hwtt_destroy(timer);
}

/* Only a call that returns a handle revives (the kept reference becomes
 * the handle's), and only the thread's latest timeout, while it still is;
 * a timeout whose cancelled callback the worker owes is never kept. */
static void test_what_is_not_revived(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct ran r = {0};
    hwt_task with_callback = {note_run, note_cancel};
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout_task(timer, &with_callback, &r, 1, HWT_HOURS, &t), 0);
    assert_true(hwt_timeout_cancel(t));
    hwt_timeout_release(t);
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &t), 0);
    assert_int_equal(revived(timer), 0);
    assert_true(hwt_timeout_cancel(t));
    hwt_timeout_release(t); /* kept */

    /* Without a handle: not revived, and now the latest. */
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, NULL), 0);
    assert_int_equal(revived(timer), 0);
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &t), 0);
    assert_int_equal(revived(timer), 0);

    /* Not the latest when released: not kept. */
    hwt_timeout *older = t;
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &t), 0);
    assert_true(hwt_timeout_cancel(older));
    hwt_timeout_release(older);
    assert_false(hwt__pool_kept(timer, older));
    hwt_timeout_release(t);

    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, 5);
    assert_int_equal(s.cancelled, 3);
    assert_int_equal(hwt_pending_timeouts(timer), 2);
    hwtt_destroy(timer);
}

/* A limited timer: the revived timeout takes the slot the cancel gave
 * back, and the limit still holds. */
static void test_a_revived_timeout_counts_against_the_limit(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.max_pending_timeouts = 1;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    struct ran r = {0};
    schedule_cancel_release(timer, &r);
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &t), 0);
    assert_int_equal(revived(timer), 1);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, NULL), HWT_EREJECTED);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

struct order {
    atomic_int next;
    atomic_int at[2];
};

static void note_order_0(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct order *o = arg;
    atomic_store(&o->at[0], atomic_fetch_add(&o->next, 1) + 1);
}

static void note_order_1(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct order *o = arg;
    atomic_store(&o->at[1], atomic_fetch_add(&o->next, 1) + 1);
}

/* One thread's timeouts keep their order: a cancelled timeout that is not
 * the thread's latest is not revived (it would be moved into the wheel,
 * and run in the tick, before the one scheduled after it). A and B, 20 ms
 * away, scheduled back to back (one tick of 10 ms, but for a boundary
 * between them), with an older timeout cancelled and released in between:
 * A runs first. */
static void test_a_revival_keeps_the_threads_order(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    for (int round = 0; round < 20; round++) {
        struct ran r = {0};
        struct order o = {0};
        hwt_timeout *old, *a, *b;
        assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &old), 0);
        assert_int_equal(hwt_new_timeout(timer, note_order_0, &o, 20, HWT_MILLISECONDS, &a), 0);
        assert_true(hwt_timeout_cancel(old));
        hwt_timeout_release(old);
        assert_int_equal(hwt_new_timeout(timer, note_order_1, &o, 20, HWT_MILLISECONDS, &b), 0);
        assert_true(hwtt_wait_until(atomic_load(&o.next) == 2, hwtt_slack_ms(5000)));
        assert_int_equal(atomic_load(&o.at[0]), 1);
        assert_int_equal(atomic_load(&o.at[1]), 2);
        hwt_timeout_release(a);
        hwt_timeout_release(b);
    }
    assert_int_equal(revived(timer), 0);
    hwtt_destroy(timer);
}

/* -------------------------------------------------------- forced races */

/* A thread that keeps a cancelled timeout, then schedules (stopping at the
 * gate, when armed) a timeout 30 ms away. */
struct producer {
    pthread_t thread;
    hwt_timer *timer;
    struct ran kept_ran, ran;
    hwt_timeout *kept, *timeout;
    atomic_bool kept_ready, go, done;
    int rc;
    int64_t scheduled_ns;
};

static void *producer_main(void *p)
{
    struct producer *pr = p;
    pr->kept = schedule_cancel_release(pr->timer, &pr->kept_ran);
    atomic_store(&pr->kept_ready, true);
    while (!atomic_load(&pr->go))
        hwtt_sleep_us(100);
    pr->scheduled_ns = hwtt_now_ns();
    pr->rc = hwt_new_timeout(pr->timer, note_run, &pr->ran, 30, HWT_MILLISECONDS, &pr->timeout);
    atomic_store(&pr->done, true);
    return NULL;
}

static void start_producer(struct producer *pr, hwt_timer *timer)
{
    memset(pr, 0, sizeof *pr);
    pr->timer = timer;
    assert_int_equal(pthread_create(&pr->thread, NULL, producer_main, pr), 0);
    assert_true(hwtt_wait_until(atomic_load(&pr->kept_ready), hwtt_slack_ms(5000)));
}

/* The schedule counted its revival and stands before its CAS; the worker
 * takes the queue and lets go of the kept timeout (its cancel woke it to
 * do so within the cancel latency). The CAS then loses: the call counts
 * itself failed and schedules anew, and that timeout runs, once. Were the
 * kept timeout revived after the worker let go of it, it would be in no
 * queue and never run. */
static void test_the_worker_letting_go_first_leaves_nothing_lost(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct producer pr;
    start_producer(&pr, timer);
    arm_gate(timer);
    atomic_store(&pr.go, true);
    assert_true(hwtt_wait_until(atomic_load(&gate_reached), hwtt_slack_ms(5000)));
    assert_true(hwtt_wait_until(hwt__queued_count(timer) == 0, hwtt_slack_ms(5000)));
    assert_true(atomic_load(&pr.kept->state) & HWT_TO_DROPPED);
    atomic_store(&gate_open, true);
    assert_int_equal(pthread_join(pr.thread, NULL), 0);
    assert_int_equal(pr.rc, 0);
    assert_int_equal(revived(timer), 0);

    assert_true(hwtt_wait_until(atomic_load(&pr.ran.count) == 1, hwtt_slack_ms(5000)));
    assert_true(atomic_load(&pr.ran.at_ns) - pr.scheduled_ns >= 30 * 1000000);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, 2);
    assert_int_equal(s.cancelled, 1);
    assert_int_equal(s.expired, 1);
    assert_int_equal(atomic_load(&pr.kept_ran.count), 0);
    hwt_timeout_release(pr.timeout);
    hwtt_destroy(timer);
}

struct stopper {
    pthread_t thread;
    hwt_timer *timer;
    hwt_timeout **list;
    size_t count;
    int rc;
    atomic_bool done;
};

static void *stopper_main(void *p)
{
    struct stopper *st = p;
    st->rc = hwt_stop(st->timer, &st->list, &st->count);
    atomic_store(&st->done, true);
    return NULL;
}

/* A stop while the schedule stands before its CAS: the final drain finds
 * the call counted (revived) and the kept timeout cancelled in the queue,
 * and lets go of it. The schedule's CAS loses, and it tries anew and finds
 * the timer stopped. Either way the new timeout ends exactly one way: not
 * scheduled (HWT_ESTOPPED), or handed back by the stop. */
static void test_a_stop_during_a_revival_leaves_nothing_lost(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct producer pr;
    start_producer(&pr, timer);
    arm_gate(timer);
    atomic_store(&pr.go, true);
    assert_true(hwtt_wait_until(atomic_load(&gate_reached), hwtt_slack_ms(5000)));

    struct stopper st = {.timer = timer};
    assert_int_equal(pthread_create(&st.thread, NULL, stopper_main, &st), 0);
    /* The drain does not wait for the paused call: its revival is counted. */
    bool stopped_first = hwtt_wait_until(atomic_load(&st.done), hwtt_slack_ms(2000));
    atomic_store(&gate_open, true);
    assert_int_equal(pthread_join(pr.thread, NULL), 0);
    assert_int_equal(pthread_join(st.thread, NULL), 0);
    assert_true(stopped_first);
    assert_int_equal(st.rc, 0);
    print_message("  schedule: %d, stop's list: %zu\n", pr.rc, st.count);
    if (pr.rc == 0) {
        assert_int_equal(st.count, 1);
        assert_ptr_equal(st.list[0], pr.timeout);
        hwt_timeout_release(pr.timeout);
    } else {
        assert_int_equal(pr.rc, HWT_ESTOPPED);
        assert_int_equal(st.count, 0);
    }
    hwt_timeouts_release(st.list, st.count);
    assert_int_equal(atomic_load(&pr.ran.count), 0);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, pr.rc == 0 ? 2 : 1);
    hwtt_destroy(timer);
}

/* ------------------------------------------------ what a thread lets go */

static void *keep_one_and_exit(void *timer)
{
    struct ran r = {0};
    schedule_cancel_release(timer, &r);
    return NULL;
}

/* A thread that exits keeping a cancelled timeout lets go of it: once the
 * worker has let go of the queue's reference, the timeout is back in the
 * pool (else the sanitizers' leak checks find the timer never freed). */
static void test_an_exiting_thread_lets_go_of_what_it_keeps(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, keep_one_and_exit, timer), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_true(hwtt_wait_until(hwt__queued_count(timer) == 0, hwtt_slack_ms(5000)));
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, 1);
    assert_int_equal(s.cancelled, 1);
    hwtt_destroy(timer);
}

/* A thread whose timer was stopped keeps nothing of it: its schedule is
 * refused, and what it kept goes with the refusal. */
static void test_a_stopped_timer_keeps_nothing_for_reuse(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct ran r = {0};
    hwt_timeout *kept = schedule_cancel_release(timer, &r);
    assert_true(hwt__pool_kept(timer, kept));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    hwt_timeout *t = NULL;
    assert_int_equal(hwt_new_timeout(timer, note_run, &r, 1, HWT_HOURS, &t), HWT_ESTOPPED);
    assert_null(t);
    assert_false(hwt__pool_kept(timer, kept));
    assert_int_equal(revived(timer), 0);
    hwtt_destroy(timer);
}

/* ------------------------------------------------- the pattern, at speed */

enum { CHURN_THREADS = 4, CHURN_ROUNDS = 20000, CHURN_RING = 16 };

/* Threads 0 and 1 cancel each timeout before the next schedule (a ring of
 * one: the latest, revived), 2 and 3 the one CHURN_RING before (never
 * revived, as it is not the latest). */
static unsigned churn_ring_of(unsigned thread)
{
    return thread < 2 ? 1 : CHURN_RING;
}

/* Per schedule: how often it ran (0 or 1), and whether its cancel won. */
struct churn_slot {
    atomic_int ran;
    bool cancelled;
};
static struct churn_slot churn_slots[CHURN_THREADS][CHURN_ROUNDS];

static void churn_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((struct churn_slot *)arg)->ran, 1);
}

struct churner {
    pthread_t thread;
    hwt_timer *timer;
    unsigned index;
    int failures;
};

/* Schedules 0-3 ms away, and cancels and releases the timeout scheduled
 * a ring before (which may have run, or be running): with the worker
 * moving, expiring and letting go meanwhile, revivals race all of it. */
static void *churn_main(void *p)
{
    struct churner *c = p;
    hwt_timeout *ring[CHURN_RING] = {0};
    unsigned n = churn_ring_of(c->index);
    unsigned seed = c->index + 1;
    for (unsigned i = 0; i < CHURN_ROUNDS; i++) {
        hwt_timeout **slot = &ring[i % n];
        if (*slot != NULL) {
            churn_slots[c->index][i - n].cancelled = hwt_timeout_cancel(*slot);
            hwt_timeout_release(*slot);
        }
        seed = seed * 1103515245 + 12345;
        if (hwt_new_timeout(c->timer, churn_run, &churn_slots[c->index][i], (seed >> 16) % 4000,
                            HWT_MICROSECONDS, slot) != 0) {
            c->failures++;
            *slot = NULL;
        }
    }
    for (unsigned i = CHURN_ROUNDS; i < CHURN_ROUNDS + n; i++) {
        hwt_timeout *t = ring[i % n];
        if (t != NULL) {
            churn_slots[c->index][i - n].cancelled = hwt_timeout_cancel(t);
            hwt_timeout_release(t);
        }
    }
    return NULL;
}

/* Every timeout ends exactly one way: run once, or cancelled and never
 * run; the counts agree. */
static void test_churning_threads_end_each_timeout_one_way(void **state)
{
    (void)state;
    memset(churn_slots, 0, sizeof churn_slots);
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    struct churner c[CHURN_THREADS];
    for (unsigned i = 0; i < CHURN_THREADS; i++) {
        c[i] = (struct churner){.timer = timer, .index = i};
        assert_int_equal(pthread_create(&c[i].thread, NULL, churn_main, &c[i]), 0);
    }
    for (unsigned i = 0; i < CHURN_THREADS; i++) {
        assert_int_equal(pthread_join(c[i].thread, NULL), 0);
        assert_int_equal(c[i].failures, 0);
    }
    uint64_t cancelled = 0;
    for (unsigned i = 0; i < CHURN_THREADS; i++)
        for (unsigned k = 0; k < CHURN_ROUNDS; k++)
            cancelled += churn_slots[i][k].cancelled;
    uint64_t total = (uint64_t)CHURN_THREADS * CHURN_ROUNDS;
    assert_true(hwtt_wait_until(({
                                    hwt_stats s;
                                    hwt_timer_stats(timer, &s);
                                    s.expired + s.cancelled == total;
                                }),
                                hwtt_slack_ms(10000)));
    int wrong = 0;
    for (unsigned i = 0; i < CHURN_THREADS; i++)
        for (unsigned k = 0; k < CHURN_ROUNDS; k++)
            wrong += atomic_load(&churn_slots[i][k].ran) != (churn_slots[i][k].cancelled ? 0 : 1);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    print_message("  %llu scheduled, %llu revived, %llu cancelled, %llu ran\n",
                  (unsigned long long)s.scheduled, (unsigned long long)revived(timer),
                  (unsigned long long)s.cancelled, (unsigned long long)s.expired);
    assert_int_equal(wrong, 0);
    assert_int_equal(s.scheduled, total);
    assert_int_equal(s.cancelled, cancelled);
    assert_int_equal(s.expired, total - cancelled);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_true(revived(timer) > 0);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_the_next_schedule_revives_a_released_cancelled_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_what_is_not_revived, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_revived_timeout_counts_against_the_limit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_revival_keeps_the_threads_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_worker_letting_go_first_leaves_nothing_lost,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_stop_during_a_revival_leaves_nothing_lost, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_an_exiting_thread_lets_go_of_what_it_keeps, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_stopped_timer_keeps_nothing_for_reuse, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_churning_threads_end_each_timeout_one_way, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
