/*
 * test_races.c - the edges of a timer's life, each interleaving forced: a
 * test hook (src/steps.h) pauses a chosen thread at a chosen step of start,
 * schedule or stop until the test lets it go, so a race is hit every time,
 * not by luck. Then the same races from several threads at full speed,
 * thousands of rounds. Every wait has a deadline and the suite a watchdog:
 * a hang fails, it does not stall CI.
 *
 * Also here, because they need the same hooks: a thread cancelled while it
 * waits in a start or a stop, and the hand-back that failed for memory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "helpers.h"
#include "internal.h"
#include "steps.h"

/* ------------------------------------------------------------- gates */

/* A gate per step: armed, the first thread to reach the step waits there
 * (reached) until the test opens it. */
struct gate {
    atomic_bool armed, reached, open;
    _Atomic(void *) timer;    /* only this timer's step */
    _Atomic unsigned arrivals; /* at the step since it was armed, paused or not */
};
static struct gate gates[HWT_STEP_COUNT];

static void step_hook(hwt__step step, void *timer)
{
    struct gate *g = &gates[step];
    if (atomic_load(&g->timer) != timer)
        return;
    atomic_fetch_add(&g->arrivals, 1);
    if (!atomic_exchange(&g->armed, false))
        return;
    atomic_store(&g->reached, true);
    int64_t deadline = hwtt_now_ns() + INT64_C(30) * 1000000000;
    while (!atomic_load(&g->open) && hwtt_now_ns() < deadline)
        hwtt_sleep_us(100);
}

static void arm(hwt__step step, hwt_timer *timer)
{
    struct gate *g = &gates[step];
    atomic_store(&g->reached, false);
    atomic_store(&g->open, false);
    atomic_store(&g->arrivals, 0);
    atomic_store(&g->timer, timer);
    atomic_store(&g->armed, true);
}

/* Counts the arrivals at a step without pausing anyone (for a step taken
 * with a lock held). */
static void watch(hwt__step step, hwt_timer *timer)
{
    struct gate *g = &gates[step];
    atomic_store(&g->armed, false);
    atomic_store(&g->arrivals, 0);
    atomic_store(&g->timer, timer);
}

/* Waits until a thread stands at the gate. */
static void expect_reached(hwt__step step)
{
    assert_true(hwtt_wait_until(atomic_load(&gates[step].reached), hwtt_slack_ms(5000)));
}

static void open_gate(hwt__step step)
{
    atomic_store(&gates[step].open, true);
}

static int setup(void **state)
{
    (void)state;
    memset(gates, 0, sizeof gates);
    hwt__set_step_hook(step_hook);
    return 0;
}

static int teardown(void **state)
{
    for (int i = 0; i < HWT_STEP_COUNT; i++)
        open_gate((hwt__step)i);
    hwt__set_step_hook(NULL);
    return hwtt_teardown_timers(state);
}

/* ------------------------------------------------------------- threads */

enum { OP_START, OP_SCHEDULE, OP_STOP_LIST, OP_STOP_DROP, OP_DESTROY, OP_RESCHEDULE };

struct call {
    pthread_t thread;
    hwt_timer *timer;
    int op;
    bool on_stripe_0; /* the calling thread uses stripe 0, whatever it was dealt */
    hwtt_rec *rec;
    atomic_bool done;
    int rc;
    hwt_timeout **list;
    size_t count;
    hwt_timeout *timeout; /* OP_RESCHEDULE: to `delay_ms`; rc is its result (0 or 1) */
    int64_t delay_ms;
};

static void *call_main(void *p)
{
    struct call *c = p;
    if (c->on_stripe_0)
        hwt__stripe_of_thread = 0;
    switch (c->op) {
    case OP_START: c->rc = hwt_timer_start(c->timer); break;
    case OP_SCHEDULE:
        c->rc = hwt_new_timeout_task(c->timer, &hwtt_rec_task, c->rec, 1, HWT_HOURS, NULL);
        break;
    case OP_STOP_LIST: c->rc = hwt_stop(c->timer, &c->list, &c->count); break;
    case OP_STOP_DROP: c->rc = hwt_stop(c->timer, NULL, NULL); break;
    case OP_DESTROY: hwt_timer_destroy(c->timer); break;
    case OP_RESCHEDULE:
        c->rc = hwt_timeout_reschedule(c->timeout, c->delay_ms, HWT_MILLISECONDS);
        break;
    }
    atomic_store(&c->done, true);
    return NULL;
}

static void begin_on(struct call *c, hwt_timer *timer, int op, hwtt_rec *rec, bool on_stripe_0)
{
    memset(c, 0, sizeof *c);
    c->timer = timer;
    c->op = op;
    c->rec = rec;
    c->on_stripe_0 = on_stripe_0;
    assert_int_equal(pthread_create(&c->thread, NULL, call_main, c), 0);
}

static void begin(struct call *c, hwt_timer *timer, int op, hwtt_rec *rec)
{
    begin_on(c, timer, op, rec, false);
}

/* Joins a call that must complete (a hang fails here, not in CI). */
static void finish(struct call *c)
{
    assert_true(hwtt_wait_until(atomic_load(&c->done), hwtt_slack_ms(10000)));
    pthread_join(c->thread, NULL);
}

static bool still_running(struct call *c)
{
    hwtt_sleep_ms(20); /* time for it to get further if it could */
    return !atomic_load(&c->done);
}

static hwt_timer *new_timer(void)
{
    return hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
}

/* -------------------------------------------------- forced interleavings */

/* The reported hang: the worker, just created, has not announced itself
 * when a stop comes in. The stop used to join it holding the lock the
 * worker needed: start, stop and worker waited for each other forever. */
static void test_stop_while_the_worker_announces_itself(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    arm(HWT_STEP_WORKER_STARTING, timer);
    struct call start, stop;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_WORKER_STARTING);
    begin(&stop, timer, OP_STOP_LIST, NULL);
    assert_true(still_running(&stop)); /* it waits for the worker's answer */
    open_gate(HWT_STEP_WORKER_STARTING);
    finish(&start);
    finish(&stop);
    assert_true(start.rc == 0 || start.rc == HWT_ESTOPPED);
    assert_int_equal(stop.rc, 0);
    assert_null(stop.list);
    assert_int_equal(stop.count, 0);
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_MILLISECONDS, NULL),
                     HWT_ESTOPPED);
    hwtt_destroy(timer);
}

/* A stop between the worker's creation and the starter's wait. */
static void test_stop_between_spawn_and_latch(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    arm(HWT_STEP_START_SPAWNED, timer);
    struct call start, stop;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_START_SPAWNED);
    begin(&stop, timer, OP_STOP_DROP, NULL);
    finish(&stop); /* the worker ends without the starter */
    open_gate(HWT_STEP_START_SPAWNED);
    finish(&start);
    assert_int_equal(start.rc, HWT_ESTOPPED);
    assert_int_equal(stop.rc, 0);
    hwtt_destroy(timer);
}

/* A stop after the latch, before the starter's own state change. */
static void test_stop_between_latch_and_start(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    arm(HWT_STEP_START_LATCHED, timer);
    struct call start, stop;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_START_LATCHED);
    begin(&stop, timer, OP_STOP_LIST, NULL);
    finish(&stop);
    open_gate(HWT_STEP_START_LATCHED);
    finish(&start);
    assert_int_equal(start.rc, HWT_ESTOPPED);
    assert_int_equal(stop.count, 0);
    hwtt_destroy(timer);
}

/* Two stops while a start is under way: one does the stop, the other
 * waits for it and gets an empty list. */
static void test_two_stops_during_a_start(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    arm(HWT_STEP_WORKER_STARTING, timer);
    struct call start, stop1, stop2;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_WORKER_STARTING);
    arm(HWT_STEP_STOP_REQUESTED, timer);
    begin(&stop1, timer, OP_STOP_LIST, NULL);
    expect_reached(HWT_STEP_STOP_REQUESTED);
    begin(&stop2, timer, OP_STOP_LIST, NULL);
    assert_true(still_running(&stop2)); /* waits for stop1 */
    open_gate(HWT_STEP_STOP_REQUESTED);
    open_gate(HWT_STEP_WORKER_STARTING);
    finish(&start);
    finish(&stop1);
    finish(&stop2);
    assert_int_equal(stop1.rc, 0);
    assert_int_equal(stop2.rc, 0);
    assert_null(stop2.list);
    assert_int_equal(stop2.count, 0);
    hwtt_destroy(timer);
}

/* A destroy while a start waits in the latch: the starter's reference
 * keeps the timer's memory (lock, condition) alive until it leaves. */
static void test_destroy_while_a_start_waits(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512); /* not tracked: destroyed here */
    arm(HWT_STEP_START_SPAWNED, timer);
    struct call start, destroy;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_START_SPAWNED);
    begin(&destroy, timer, OP_DESTROY, NULL);
    finish(&destroy);
    open_gate(HWT_STEP_START_SPAWNED);
    finish(&start);
    assert_int_equal(start.rc, HWT_ESTOPPED);
}

/* The timer's last reference calls free_memory: noted, and the memory kept
 * until every call is out, so that freeing it under a call fails an
 * assertion instead of being a use after free. */
static void (*free_for_real)(hwt_timer *timer);
static atomic_bool timer_freed;

static void note_freed(hwt_timer *timer)
{
    (void)timer;
    atomic_store(&timer_freed, true);
}

/* A thread's first schedule on a timer, paused before it counts itself on
 * its stripe, and a destroy meanwhile: the stop does not wait for it (it
 * has not counted itself), and the destroy drops the creator's reference.
 * The call's own reference keeps the timer until it is out: it then sees
 * the stop, and frees the timer. `started`: the timer was started before
 * (else this call starts the worker). */
static void destroy_during_a_first_schedule(bool started)
{
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512); /* not tracked: destroyed here */
    if (started)
        assert_int_equal(hwt_timer_start(timer), 0);
    free_for_real = timer->free_memory;
    timer->free_memory = note_freed;
    atomic_store(&timer_freed, false);
    arm(HWT_STEP_SCHEDULE_STARTED, timer);
    hwtt_rec rec = {0};
    struct call schedule, destroy;
    begin(&schedule, timer, OP_SCHEDULE, &rec);
    expect_reached(HWT_STEP_SCHEDULE_STARTED);
    begin(&destroy, timer, OP_DESTROY, NULL);
    finish(&destroy);
    bool freed_under_the_call = atomic_load(&timer_freed);
    open_gate(HWT_STEP_SCHEDULE_STARTED);
    finish(&schedule);
    assert_true(atomic_load(&timer_freed));
    free_for_real(timer);
    assert_false(freed_under_the_call);
    assert_int_equal(schedule.rc, HWT_ESTOPPED);
    assert_int_equal(atomic_load(&rec.ran), 0);
}

static void test_destroy_during_the_first_schedule_frees_nothing_under_it(void **state)
{
    (void)state;
    destroy_during_a_first_schedule(false);
}

static void test_destroy_during_a_threads_first_schedule_frees_nothing_under_it(void **state)
{
    (void)state;
    destroy_during_a_first_schedule(true);
}

/* A stats read that found the worker running, paused before it reads the
 * clock while the worker ends: its clock is past the worker's end. Reads
 * never go back (counters only grow), and after the stop returned they
 * stand still (ticks count until the worker ended): the paused read, let
 * go later, reports the worker's last tick too. */
struct ticks_read {
    hwt_timer *timer;
    uint64_t ticks;
};

static void *read_ticks(void *p)
{
    struct ticks_read *r = p;
    hwt_stats st;
    hwt_timer_stats(r->timer, &st);
    r->ticks = st.ticks;
    return NULL;
}

static uint64_t ticks_of(hwt_timer *timer)
{
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    return st.ticks;
}

static void test_ticks_never_go_back_when_a_read_meets_the_stop(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    assert_int_equal(hwt_timer_start(timer), 0);
    assert_true(hwtt_wait_until(ticks_of(timer) >= 5, hwtt_slack_ms(2000)));
    arm(HWT_STEP_STATS_CLOCK, timer);
    struct ticks_read r = {timer, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_ticks, &r), 0);
    expect_reached(HWT_STEP_STATS_CLOCK);
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    uint64_t after_stop = ticks_of(timer);
    hwtt_sleep_ms(10); /* ticks pass between the worker's end and the paused read's clock */
    open_gate(HWT_STEP_STATS_CLOCK);
    assert_int_equal(pthread_join(th, NULL), 0);
    uint64_t later = ticks_of(timer);
    print_message("  ticks after the stop: %llu; read across it: %llu; later: %llu\n",
                  (unsigned long long)after_stop, (unsigned long long)r.ticks,
                  (unsigned long long)later);
    assert_int_equal(r.ticks, after_stop);
    assert_int_equal(later, after_stop);
}

/* A fork while another thread's destroy has counted its timer out of the
 * live ones and not yet unlinked it from their list: the child inherits
 * the timer (on its list: it may destroy it again) and had counted it out
 * already. With every inherited timer destroyed, its own 65th, the first
 * past 64, did not warn (SPEC: more than 64 live logs once). The child's
 * count is its list's now. */
static hwt_timer *counted[HWT_MAX_LIVE_TIMERS];

static int child_replaces_every_inherited_timer(void *p)
{
    (void)p;
    for (int i = 0; i < HWT_MAX_LIVE_TIMERS; i++)
        hwt_timer_destroy(counted[i]);
    static hwtt_log log;
    hwt_options o;
    hwt_options_init(&o);
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    static hwt_timer *mine[HWT_MAX_LIVE_TIMERS + 1];
    for (int i = 0; i < HWT_MAX_LIVE_TIMERS; i++)
        if (hwt_timer_create(&mine[i], &o) != 0)
            return 1;
    if (atomic_load(&log.count[HWT_LOG_ERROR]) != 0)
        return 2;
    if (hwt_timer_create(&mine[HWT_MAX_LIVE_TIMERS], &o) != 0)
        return 3;
    return atomic_load(&log.count[HWT_LOG_ERROR]) == 1 ? 0 : 4;
}

static void test_a_child_forked_during_a_destroy_counts_its_live_timers(void **state)
{
    (void)state;
    for (int i = 0; i < HWT_MAX_LIVE_TIMERS; i++)
        assert_int_equal(hwt_timer_create(&counted[i], NULL), 0);
    arm(HWT_STEP_DESTROY_UNLINKING, counted[0]);
    struct call destroy;
    begin(&destroy, counted[0], OP_DESTROY, NULL);
    expect_reached(HWT_STEP_DESTROY_UNLINKING);
    int rc = hwtt_run_in_child(child_replaces_every_inherited_timer, NULL, hwtt_slack_ms(10000));
    open_gate(HWT_STEP_DESTROY_UNLINKING);
    finish(&destroy);
    for (int i = 1; i < HWT_MAX_LIVE_TIMERS; i++)
        hwt_timer_destroy(counted[i]);
    assert_int_equal(rc, 0);
}

/* A fork while a start is latched: the worker has set its start time and
 * ticks, the starter has not yet marked the timer STARTED. The child's
 * inherited timer lost its worker at the fork, and should report the ticks
 * the worker counted until then ("ticks elapsed since the worker started
 * ... until it ended (... for a timer inherited by a fork child, the
 * fork)"); the parent, once the start is over, counts them too. */
struct latched_fork {
    hwt_timer *timer;
    uint64_t at_least; /* ticks that had passed since the worker's start at the fork */
};

static int child_reads_latched_ticks(void *p)
{
    struct latched_fork *f = p;
    uint64_t ticks = ticks_of(f->timer);
    return ticks >= f->at_least ? 0 : 1 + (int)(ticks > 100 ? 100 : ticks);
}

static void test_a_child_forked_during_a_start_counts_the_workers_ticks(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer(); /* 1 ms ticks */
    arm(HWT_STEP_START_LATCHED, timer);
    struct call start;
    begin(&start, timer, OP_START, NULL);
    expect_reached(HWT_STEP_START_LATCHED); /* the worker set start_ns and runs */
    int64_t start_ns = timer->start_ns;
    assert_true(hwtt_wait_until(hwtt_now_ns() - start_ns >= 20 * timer->tick_ns,
                                hwtt_slack_ms(2000)));
    struct latched_fork f = {timer, (uint64_t)((hwtt_now_ns() - start_ns) / timer->tick_ns)};
    int rc = hwtt_run_in_child(child_reads_latched_ticks, &f, hwtt_slack_ms(10000));
    open_gate(HWT_STEP_START_LATCHED);
    finish(&start);
    assert_int_equal(start.rc, 0);
    uint64_t parent = ticks_of(timer);
    print_message("  ticks at the fork: >= %llu; the child's: %s%d; the parent's after the "
                  "start: %llu\n",
                  (unsigned long long)f.at_least, rc == 0 ? "ok, status " : "status (1 + ticks) ",
                  rc, (unsigned long long)parent);
    assert_true(parent >= f.at_least); /* the parent counts them */
    assert_int_equal(rc, 0);
    hwtt_destroy(timer);
}

/* A first schedule racing a stop, paused where it has seen the timer
 * started but not yet counted itself: the stop does not wait for it; it
 * then sees SHUTDOWN and fails, and the count read between its announce
 * and its failure, after the stop returned, is 0. */
static void test_pending_is_zero_after_stop_while_a_schedule_fails(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    assert_int_equal(hwt_timer_start(timer), 0);
    hwtt_rec rec = {0};
    arm(HWT_STEP_SCHEDULE_STARTED, timer);
    struct call sched, stop;
    begin(&sched, timer, OP_SCHEDULE, &rec);
    expect_reached(HWT_STEP_SCHEDULE_STARTED);
    arm(HWT_STEP_STOP_ANSWERED, timer);
    begin(&stop, timer, OP_STOP_LIST, NULL);
    expect_reached(HWT_STEP_STOP_ANSWERED); /* the final drain is over */
    arm(HWT_STEP_SCHEDULE_ANNOUNCED, timer);
    open_gate(HWT_STEP_SCHEDULE_STARTED);
    expect_reached(HWT_STEP_SCHEDULE_ANNOUNCED); /* counted, not yet failed */
    open_gate(HWT_STEP_STOP_ANSWERED);
    finish(&stop);
    assert_int_equal(stop.count, 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    assert_int_equal(st.pending, 0);
    open_gate(HWT_STEP_SCHEDULE_ANNOUNCED);
    finish(&sched);
    assert_int_equal(sched.rc, HWT_ESTOPPED);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_int_equal(atomic_load(&rec.ran) + atomic_load(&rec.cb), 0);
    hwtt_destroy(timer);
}

/* A schedule that counted itself before SHUTDOWN: the stop waits for it,
 * and its timeout is handed back. */
static void test_stop_waits_for_an_announced_schedule(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    assert_int_equal(hwt_timer_start(timer), 0);
    hwtt_rec rec = {0};
    arm(HWT_STEP_SCHEDULE_ANNOUNCED, timer);
    struct call sched, stop;
    begin(&sched, timer, OP_SCHEDULE, &rec);
    expect_reached(HWT_STEP_SCHEDULE_ANNOUNCED);
    begin(&stop, timer, OP_STOP_LIST, NULL);
    assert_true(still_running(&stop));
    open_gate(HWT_STEP_SCHEDULE_ANNOUNCED);
    finish(&sched);
    finish(&stop);
    if (sched.rc == 0) { /* it saw the timer running: handed back */
        assert_int_equal(stop.count, 1);
        assert_ptr_equal(hwt_timeout_arg(stop.list[0]), &rec);
    } else {
        assert_int_equal(sched.rc, HWT_ESTOPPED);
        assert_int_equal(stop.count, 0);
    }
    hwt_timeouts_release(stop.list, stop.count);
    assert_int_equal(atomic_load(&rec.ran) + atomic_load(&rec.cb), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwtt_destroy(timer);
}

/* Two schedules on one stripe while a stop drains it: A saw the timer
 * running and has not queued its timeout; B found the timer started, then
 * counts itself and fails (it sees SHUTDOWN) while the worker counts the
 * stripe. Were B's failure counted and its start not, the counts would
 * balance with A still out: the stop would return without A's timeout,
 * which would then never end. The worker must come round again (the
 * step's arrivals) and not finish the drain until A has queued. */
static void test_a_schedule_failing_during_the_count_hides_no_other(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    assert_int_equal(hwt_timer_start(timer), 0);
    hwtt_rec rec_a = {0}, rec_b = {0};
    struct call a, b, stop;
    arm(HWT_STEP_SCHEDULE_ADMITTED, timer);
    begin_on(&a, timer, OP_SCHEDULE, &rec_a, true);
    expect_reached(HWT_STEP_SCHEDULE_ADMITTED);
    arm(HWT_STEP_SCHEDULE_STARTED, timer);
    begin_on(&b, timer, OP_SCHEDULE, &rec_b, true);
    expect_reached(HWT_STEP_SCHEDULE_STARTED);
    arm(HWT_STEP_STOP_COUNTING, timer); /* stripe 0 is counted first */
    begin(&stop, timer, OP_STOP_LIST, NULL);
    expect_reached(HWT_STEP_STOP_COUNTING);
    open_gate(HWT_STEP_SCHEDULE_STARTED);
    finish(&b);
    assert_int_equal(b.rc, HWT_ESTOPPED);
    arm(HWT_STEP_WORKER_DRAINED, timer);
    open_gate(HWT_STEP_STOP_COUNTING);
    /* Stripe 0 counted again, or (the fault) the other 15 stripes and the
     * end of the drain. */
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_STOP_COUNTING].arrivals) >= 20 ||
                                    atomic_load(&gates[HWT_STEP_WORKER_DRAINED].reached),
                                hwtt_slack_ms(5000)));
    if (atomic_load(&gates[HWT_STEP_WORKER_DRAINED].reached))
        fail_msg("the drain ended while a schedule that saw the timer running was still out");
    open_gate(HWT_STEP_SCHEDULE_ADMITTED);
    finish(&a);
    assert_int_equal(a.rc, 0);
    expect_reached(HWT_STEP_WORKER_DRAINED);
    open_gate(HWT_STEP_WORKER_DRAINED);
    finish(&stop);
    assert_int_equal(stop.rc, 0);
    assert_int_equal(stop.count, 1);
    assert_ptr_equal(hwt_timeout_arg(stop.list[0]), &rec_a);
    hwt_timeouts_release(stop.list, stop.count);
    assert_int_equal(atomic_load(&rec_a.ran) + atomic_load(&rec_a.cb), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwtt_destroy(timer);
}

/* ------------------------------------------------ thread cancellation */

static void *cancellable_call(void *p)
{
    call_main(p);
    pthread_testcancel(); /* where a cancel held off inside the call acts */
    return NULL;
}

/* A thread cancelled while it waits in the start latch, or in a stop,
 * leaves no lock held: later stops and destroys complete. */
static void test_cancelled_in_start_latch(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512);
    arm(HWT_STEP_WORKER_STARTING, timer);
    struct call start;
    memset(&start, 0, sizeof start);
    start.timer = timer;
    start.op = OP_START;
    assert_int_equal(pthread_create(&start.thread, NULL, cancellable_call, &start), 0);
    expect_reached(HWT_STEP_WORKER_STARTING);
    hwtt_sleep_ms(20); /* into its condition wait */
    pthread_cancel(start.thread);
    open_gate(HWT_STEP_WORKER_STARTING);
    void *result = NULL;
    pthread_join(start.thread, &result);
    assert_ptr_equal(result, PTHREAD_CANCELED); /* cancelled after the call */
    assert_true(atomic_load(&start.done));
    struct call stop;
    begin(&stop, timer, OP_STOP_DROP, NULL);
    finish(&stop);
    struct call destroy;
    begin(&destroy, timer, OP_DESTROY, NULL);
    finish(&destroy);
}

static void block_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_bool *go = arg;
    int64_t deadline = hwtt_now_ns() + INT64_C(30) * 1000000000;
    while (!atomic_load(go) && hwtt_now_ns() < deadline)
        hwtt_sleep_us(100);
}

static void test_cancelled_in_stop(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512);
    atomic_bool go = false;
    hwtt_rec rec = {0};
    assert_int_equal(hwt_new_timeout(timer, block_task, &go, 0, HWT_MILLISECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 1, HWT_HOURS, NULL), 0);
    assert_true(hwtt_wait_until(hwt_pending_timeouts(timer) == 1, hwtt_slack_ms(5000)));
    struct call stop;
    memset(&stop, 0, sizeof stop);
    stop.timer = timer;
    stop.op = OP_STOP_DROP;
    assert_int_equal(pthread_create(&stop.thread, NULL, cancellable_call, &stop), 0);
    hwtt_sleep_ms(20); /* into its wait for the busy worker */
    pthread_cancel(stop.thread);
    atomic_store(&go, true);
    void *result = NULL;
    pthread_join(stop.thread, &result);
    assert_ptr_equal(result, PTHREAD_CANCELED);
    assert_true(atomic_load(&stop.done)); /* the stop itself completed */
    assert_int_equal(stop.rc, 0);
    assert_int_equal(atomic_load(&rec.cb), 1);
    struct call destroy;
    begin(&destroy, timer, OP_DESTROY, NULL);
    finish(&destroy);
}

/* ------------------------------------- a hand-back that failed for memory */

static atomic_bool fail_stop_list;
static int fail_hook(hwt__alloc_site site)
{
    return site == HWT_SITE_STOP_LIST && atomic_load(&fail_stop_list);
}

static pthread_t worker_thread;
static atomic_int callbacks_off_worker, callbacks;

static void note_worker(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    worker_thread = pthread_self();
}

static void on_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_fetch_add(&callbacks, 1);
    if (!pthread_equal(pthread_self(), worker_thread))
        atomic_fetch_add(&callbacks_off_worker, 1);
}

static void on_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* SPEC 2: after a list stop that failed with HWT_ENOMEM, the next stop
 * hands the timeouts back, or drops them with their cancelled callbacks on
 * the worker, as always. */
static void test_after_a_failed_hand_back_callbacks_run_on_the_worker(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    atomic_bool ran = false;
    assert_int_equal(hwt_new_timeout(timer, note_worker, &ran, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(hwt_pending_timeouts(timer) == 0, hwtt_slack_ms(5000)));
    const hwt_task task = {.run = on_run, .cancelled = on_cancelled};
    for (int i = 0; i < 100; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &task, NULL, 1, HWT_HOURS, NULL), 0);
    atomic_store(&callbacks, 0);
    atomic_store(&callbacks_off_worker, 0);
    hwt__set_alloc_fail_hook(fail_hook);
    atomic_store(&fail_stop_list, true);
    hwt_timeout **list = NULL;
    size_t n = 7;
    assert_int_equal(hwt_stop(timer, &list, &n), HWT_ENOMEM);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    /* Still kept: a second list stop that also fails keeps them again. */
    assert_int_equal(hwt_stop(timer, &list, &n), HWT_ENOMEM);
    atomic_store(&fail_stop_list, false);
    hwt__set_alloc_fail_hook(NULL);
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0); /* drops them */
    assert_int_equal(atomic_load(&callbacks), 100);
    assert_int_equal(atomic_load(&callbacks_off_worker), 0);
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    hwtt_destroy(timer);
}

static void test_after_a_failed_hand_back_the_next_stop_hands_back(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    hwtt_rec rec = {0};
    for (int i = 0; i < 10; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 1, HWT_HOURS, NULL), 0);
    hwt__set_alloc_fail_hook(fail_hook);
    atomic_store(&fail_stop_list, true);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), HWT_ENOMEM);
    atomic_store(&fail_stop_list, false);
    hwt__set_alloc_fail_hook(NULL);
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 10);
    for (size_t i = 0; i < n; i++)
        assert_true(hwt_timeout_is_cancelled(list[i]));
    hwt_timeouts_release(list, n);
    assert_int_equal(atomic_load(&rec.ran) + atomic_load(&rec.cb), 0);
    hwtt_destroy(timer);
}

/* A destroy that came while a list stop was failing for memory: it waited
 * for that stop, and then must end the timeouts the worker kept, with
 * their cancelled callbacks, as a destroy after it would. It used to
 * return once the other stop was done, as if that had ended them: they
 * never ended, and the parked worker was never joined. The destroy is
 * known to wait (the step's arrival, counted with the lock held, which
 * its wait then releases) before the failing stop may go on. */
static void test_a_destroy_waiting_for_a_failing_list_stop_ends_the_timeouts(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512); /* not tracked: destroyed here */
    hwtt_rec rec = {0};
    for (int i = 0; i < 10; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 1, HWT_HOURS, NULL), 0);
    hwt__set_alloc_fail_hook(fail_hook);
    atomic_store(&fail_stop_list, true);
    arm(HWT_STEP_STOP_ANSWERED, timer);
    struct call stop, destroy;
    begin(&stop, timer, OP_STOP_LIST, NULL);
    expect_reached(HWT_STEP_STOP_ANSWERED);
    atomic_store(&fail_stop_list, false);
    hwt__set_alloc_fail_hook(NULL);
    watch(HWT_STEP_STOP_WAITS, timer);
    begin(&destroy, timer, OP_DESTROY, NULL);
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_STOP_WAITS].arrivals) == 1,
                                hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_STOP_ANSWERED);
    finish(&stop);
    assert_int_equal(stop.rc, HWT_ENOMEM);
    assert_null(stop.list);
    finish(&destroy);
    assert_int_equal(atomic_load(&rec.cb), 10);
    assert_int_equal(atomic_load(&rec.ran), 0);
}

/* ------------------------------------------------- at full speed */

#define ROUNDS 2000

struct racer {
    hwt_timer *timer;
    pthread_barrier_t *barrier;
    int op;
    hwtt_rec *rec;
    int rc;
    hwt_timeout **list;
    size_t count;
    int scheduled;
};

static void *racer_main(void *p)
{
    struct racer *r = p;
    pthread_barrier_wait(r->barrier);
    switch (r->op) {
    case OP_START: r->rc = hwt_timer_start(r->timer); break;
    case OP_SCHEDULE:
        for (int i = 0; i < 8; i++)
            if (hwt_new_timeout_task(r->timer, &hwtt_rec_task, r->rec, i % 2 ? 0 : 1, HWT_HOURS,
                                     NULL) == 0)
                r->scheduled++;
        break;
    case OP_STOP_LIST: r->rc = hwt_stop(r->timer, &r->list, &r->count); break;
    case OP_STOP_DROP: r->rc = hwt_stop(r->timer, NULL, NULL); break;
    }
    return NULL;
}

/* A timeout reaches the worker overdue - its deadline passed while its
 * producer was held up between reading it and queueing the timeout, and the
 * worker ran the ticks past it ahead of a long transfer - while a
 * reschedule to an earlier deadline holds it BUSY: the worker sets it aside
 * for the reschedule instead of expiring it. Its queue link covers the
 * wheel links, and the worker clears it as it takes the timeout off the
 * queue: without that, it took the stale link for a wheel link and unlinked
 * through it (a crash). It must run once. */
static atomic_bool hold_released, hold_started;
static atomic_int overdue_runs, bulk_runs;

static void hold_worker(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&hold_started, true);
    hwtt_wait_until(atomic_load(&hold_released), hwtt_slack_ms(10000));
}

static void count_into(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add((atomic_int *)arg, 1);
}

enum { OVERDUE_DELAY_MS = 200 };

struct overdue_calls {
    hwt_timer *timer;
    hwt_timeout *overdue; /* written by hwt_new_timeout before it queues */
    unsigned stripe;
    int rc_first, rc_second;
    atomic_bool done, rescheduled;
    bool moved;
};

/* Schedules the one that will be overdue (paused before it is queued) and
 * one behind it, on this thread's stripe. */
static void *schedule_overdue(void *p)
{
    struct overdue_calls *c = p;
    c->stripe = hwt__stripe_index();
    c->rc_first = hwt_new_timeout(c->timer, count_into, &overdue_runs, OVERDUE_DELAY_MS,
                                  HWT_MILLISECONDS, &c->overdue);
    c->rc_second = hwt_new_timeout(c->timer, count_into, &bulk_runs, 0, HWT_MILLISECONDS, NULL);
    atomic_store(&c->done, true);
    return NULL;
}

static void *reschedule_overdue(void *p)
{
    struct overdue_calls *c = p;
    c->moved = hwt_timeout_reschedule(c->overdue, 0, HWT_MILLISECONDS); /* earlier: BUSY */
    atomic_store(&c->rescheduled, true);
    return NULL;
}

static void test_an_overdue_timeout_taken_while_rescheduled_runs_once(void **state)
{
    (void)state;
    enum { BULK = HWT_TRANSFER_SLICE + 100 };
    atomic_store(&hold_released, false);
    atomic_store(&hold_started, false);
    atomic_store(&overdue_runs, 0);
    atomic_store(&bulk_runs, 0);
    hwt_timer *timer = new_timer();
    assert_int_equal(hwt_new_timeout(timer, hold_worker, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&hold_started), hwtt_slack_ms(5000)));

    /* Its deadline read, its handle out, not queued yet. */
    struct overdue_calls c = {.timer = timer};
    arm(HWT_STEP_SCHEDULE_ADMITTED, timer);
    pthread_t scheduler, rescheduler;
    assert_int_equal(pthread_create(&scheduler, NULL, schedule_overdue, &c), 0);
    expect_reached(HWT_STEP_SCHEDULE_ADMITTED);
    int64_t admitted = hwtt_now_ns();
    /* A reschedule to an earlier deadline holds it BUSY. */
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    assert_int_equal(pthread_create(&rescheduler, NULL, reschedule_overdue, &c), 0);
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED);
    /* Past its deadline by some ticks, more than a slice on another stripe,
     * due now: the worker runs the ticks up to them ahead of the transfer. */
    assert_true(hwtt_wait_until(hwtt_now_ns() - admitted > (OVERDUE_DELAY_MS + 5) * 1000000,
                                OVERDUE_DELAY_MS + 1000));
    for (int i = 0; i < BULK; i++)
        assert_int_equal(hwt_new_timeout(timer, count_into, &bulk_runs, 0, HWT_MILLISECONDS, NULL),
                         0);
    /* The worker moves the first slice. */
    arm(HWT_STEP_TRANSFER_SLICED, timer);
    atomic_store(&hold_released, true);
    expect_reached(HWT_STEP_TRANSFER_SLICED);
    /* Queued now, behind the ticks: the next slice takes it overdue. */
    open_gate(HWT_STEP_SCHEDULE_ADMITTED);
    assert_true(hwtt_wait_until(atomic_load(&c.done), hwtt_slack_ms(5000)));
    pthread_join(scheduler, NULL);
    assert_int_equal(c.rc_first, 0);
    assert_int_equal(c.rc_second, 0);
    assert_int_not_equal(c.stripe, hwt__stripe_index());
    open_gate(HWT_STEP_TRANSFER_SLICED);
    /* Every other one ran: the slice that took it is done. */
    assert_true(hwtt_wait_until(atomic_load(&bulk_runs) == BULK + 1, hwtt_slack_ms(10000)));
    assert_int_equal(atomic_load(&overdue_runs), 0); /* not while BUSY */
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    assert_true(hwtt_wait_until(atomic_load(&c.rescheduled), hwtt_slack_ms(5000)));
    pthread_join(rescheduler, NULL);
    assert_true(c.moved);
    assert_true(hwtt_wait_until(atomic_load(&overdue_runs) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_release(c.overdue);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&overdue_runs), 1);
    assert_int_equal(atomic_load(&bulk_runs), BULK + 1);
}

/* ------------------------------------- reschedules the worker waits for */

static void begin_reschedule(struct call *c, hwt_timeout *t, int64_t delay_ms)
{
    memset(c, 0, sizeof *c);
    c->op = OP_RESCHEDULE;
    c->timeout = t;
    c->delay_ms = delay_ms;
    assert_int_equal(pthread_create(&c->thread, NULL, call_main, c), 0);
}

/* finish() and the reschedule's result. */
static bool finish_reschedule(struct call *c)
{
    finish(c);
    return c->rc != 0;
}

/* In the wheel (the worker has moved it from its queue). */
static void expect_in_wheel(hwt_timeout *t)
{
    assert_true(hwtt_wait_until(atomic_load(&t->state) & HWT_TO_TRANSFERRED, hwtt_slack_ms(5000)));
}

/* Two reschedules to earlier deadlines, the second taking over the first
 * (BUSY) after the first wrote its deadline: the second read that deadline,
 * which the worker was never told of, as the one to compare with, found
 * its own later, and told nobody; the first, taken over, told nobody
 * either. The timeout stayed in its slot an hour away. */
static void test_a_reschedule_that_takes_over_another_has_the_timeout_filed_again(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    atomic_int ran = 0;
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 1, HWT_HOURS, &t), 0);
    expect_in_wheel(t);
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    struct call first;
    begin_reschedule(&first, t, 100);
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED);
    assert_true(hwt_timeout_reschedule(t, 300, HWT_MILLISECONDS));
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    assert_true(finish_reschedule(&first));
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* A reschedule held in its write (BUSY, as if preempted there) while its
 * timeout falls due: the worker deferred the timeout onto its own moved
 * stack, so found that stack not empty, passed again at once, deferred it
 * again, and so on at full speed for as long as the reschedule was held -
 * a CPU, and with a real-time worker on the rescheduler's CPU, the
 * rescheduler never got it back. It looks at the timeout once a tick now,
 * and sleeps in between. */
static void test_a_reschedule_held_in_its_write_leaves_the_worker_asleep(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer(); /* 1 ms tick */
    atomic_int ran = 0;
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 50, HWT_MILLISECONDS, &t), 0);
    expect_in_wheel(t);
    watch(HWT_STEP_WORKER_DEFERS, timer);
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    struct call c;
    begin_reschedule(&c, t, 20); /* earlier: the BUSY way */
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED);
    /* At its slot, the worker finds it BUSY. */
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_WORKER_DEFERS].arrivals) > 0,
                                hwtt_slack_ms(5000)));
    watch(HWT_STEP_WORKER_PLANNED, timer);
    int64_t t0 = hwtt_now_ns();
    hwtt_sleep_ms(200); /* the window the passes are counted over */
    unsigned passes = atomic_load(&gates[HWT_STEP_WORKER_PLANNED].arrivals);
    int64_t window_ms = (hwtt_now_ns() - t0) / 1000000;
    print_message("  %u passes in %lld ms with the reschedule held\n", passes,
                  (long long)window_ms);
    /* At most one every HWT_NAP_MAX_NS (a pass a tick here), and a few. */
    assert_true(passes <= (unsigned)(window_ms * 4 + 20));
    assert_int_equal(atomic_load(&ran), 0);
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    assert_true(finish_reschedule(&c));
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* A reschedule earlier that has set MOVED and not pushed its entry yet (as
 * if preempted there), on a timer whose worker sleeps far (the next timeout
 * 20 s on): another call then cancels the timeout, or moves it earlier
 * again. Seeing MOVED, neither pushes an entry of its own: each wakes the
 * worker, which found no entry and slept as planned; the held call then
 * pushed and woke it only for its own, later deadline. The cancelled
 * callback waited for the far wake-up (SPEC: within max(tick, 100 ms)),
 * and so did the timeout moved to 100 ms. */
static hwt_timer *far_sleeping_timer(uint32_t max_transfers);

struct held_push {
    hwt_timer *timer;
    hwt_timeout *t, *far;
    struct call call; /* the held reschedule */
    unsigned plans;   /* the worker's, when it was held */
};

/* T (60 s on, `task`) and a timeout 20 s on, on a worker that sleeps until
 * then; a reschedule of T to 40 s held after its release, before its push. */
static void hold_a_push(struct held_push *h, const hwt_task *task, void *arg)
{
    h->timer = far_sleeping_timer(100000);
    assert_int_equal(hwt_new_timeout_task(h->timer, task, arg, 60, HWT_SECONDS, &h->t), 0);
    assert_int_equal(hwt_new_timeout(h->timer, hwtt_count_task, NULL, 20, HWT_SECONDS, &h->far), 0);
    expect_in_wheel(h->t);
    expect_in_wheel(h->far);
    arm(HWT_STEP_RESCHEDULE_TOLD, h->timer);
    begin_reschedule(&h->call, h->t, 40000); /* from 60 s: earlier, so it pushes */
    expect_reached(HWT_STEP_RESCHEDULE_TOLD);
    watch(HWT_STEP_WORKER_PLANNED, h->timer);
    h->plans = atomic_load(&gates[HWT_STEP_WORKER_PLANNED].arrivals);
}

/* Lets the held call push once the worker has planned again after the
 * other call's wake-up. */
static void push_after_the_workers_plan(struct held_push *h)
{
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_WORKER_PLANNED].arrivals) > h->plans,
                                hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_TOLD);
    assert_true(finish_reschedule(&h->call));
}

static void end_held_push(struct held_push *h)
{
    hwt_timeout_release(h->t);
    hwt_timeout_release(h->far);
    hwtt_destroy(h->timer);
}

static void test_a_cancel_while_a_reschedule_pushes_is_heard_in_time(void **state)
{
    (void)state;
    hwtt_rec rec = {0};
    struct held_push h;
    hold_a_push(&h, &hwtt_rec_task, &rec);
    assert_true(hwt_timeout_cancel(h.t));
    push_after_the_workers_plan(&h);
    assert_true(hwtt_wait_until(atomic_load(&rec.cb) == 1, hwtt_slack_ms(1000)));
    assert_int_equal(atomic_load(&rec.ran), 0);
    end_held_push(&h);
}

static void test_a_move_earlier_while_another_pushes_runs_in_time(void **state)
{
    (void)state;
    atomic_int ran = 0;
    static const hwt_task counting = {.run = hwtt_count_task};
    struct held_push h;
    hold_a_push(&h, &counting, &ran);
    int64_t moved_at = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h.t, 100, HWT_MILLISECONDS));
    push_after_the_workers_plan(&h);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(1000)));
    /* Not early: the 100 ms, not the held call's 40 s, were the last word. */
    assert_true(hwtt_now_ns() - moved_at >= 100 * 1000000);
    end_held_push(&h);
}

/* SPEC: hwt_timeout_reschedule is lock-free. Seven calls moving one timeout
 * earlier, each held between its claim and its write (as if preempted
 * there): an eighth waited (yielding) for one of them, as the count of
 * calls writing at once had three bits. It has six now: the eighth goes
 * through. Every call reaching the step waits while `holding_claims`. */
static atomic_bool holding_claims;
static atomic_int claims_held;
static _Atomic(void *) claims_timer;

static void hold_claims(hwt__step step, void *timer)
{
    if (step != HWT_STEP_RESCHEDULE_CLAIMING || timer != atomic_load(&claims_timer))
        return;
    atomic_fetch_add(&claims_held, 1);
    hwtt_wait_until(!atomic_load(&holding_claims), hwtt_slack_ms(20000));
    atomic_fetch_sub(&claims_held, 1);
}

enum { CLAIMS_HELD = 7 };

static void test_a_reschedule_goes_through_seven_held_in_their_write(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, &t), 0);
    atomic_store(&claims_timer, timer);
    atomic_store(&holding_claims, true);
    hwt__set_step_hook(hold_claims);
    struct call held[CLAIMS_HELD], eighth;
    for (int i = 0; i < CLAIMS_HELD; i++)
        begin_reschedule(&held[i], t, 10 * 60 * 1000); /* earlier than the hour */
    assert_true(hwtt_wait_until(atomic_load(&claims_held) == CLAIMS_HELD, hwtt_slack_ms(5000)));
    atomic_store(&claims_timer, NULL); /* the eighth is not held */
    begin_reschedule(&eighth, t, 20 * 60 * 1000);
    bool through = hwtt_wait_until(atomic_load(&eighth.done), hwtt_slack_ms(5000));
    atomic_store(&holding_claims, false);
    for (int i = 0; i < CLAIMS_HELD; i++)
        assert_true(finish_reschedule(&held[i]));
    assert_true(finish_reschedule(&eighth));
    hwt__set_step_hook(step_hook);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
    assert_true(through);
}

/* A reschedule to an earlier deadline has set MOVED and not yet taken its
 * reference and pushed the timeout on its moved stack (paused at
 * HWT_STEP_RESCHEDULE_TOLD). The worker, not told yet, runs the timeout at
 * its old slot; then a stop. Its final drain waited only for the moved
 * entries of timeouts it took itself: the worker was gone when the entry
 * came, and the entry's reference kept the timeout, and its timer, for
 * good. The drain now waits for the entry (either order is fine here: the
 * stop may end only after the reschedule has pushed). */
static void test_a_move_told_after_the_timeout_ran_is_not_left_behind(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    hwtt_rec rec = {0};
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 100, HWT_MILLISECONDS, &t), 0);
    expect_in_wheel(t);
    arm(HWT_STEP_RESCHEDULE_TOLD, timer);
    struct call earlier;
    begin_reschedule(&earlier, t, 0);
    expect_reached(HWT_STEP_RESCHEDULE_TOLD);
    assert_true(hwtt_wait_until(atomic_load(&rec.ran) == 1, hwtt_slack_ms(5000)));
    watch(HWT_STEP_DRAIN_WAITS, timer);
    struct call stop;
    begin(&stop, timer, OP_STOP_LIST, NULL);
    assert_true(hwtt_wait_until(atomic_load(&stop.done) ||
                                    atomic_load(&gates[HWT_STEP_DRAIN_WAITS].arrivals) > 0,
                                hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_TOLD);
    assert_true(finish_reschedule(&earlier)); /* it won while the timeout was pending */
    finish(&stop);
    assert_int_equal(stop.rc, 0);
    assert_int_equal(stop.count, 0);
    assert_int_equal(atomic_load(&rec.ran), 1);
    assert_int_equal(atomic_load(&rec.cb), 0);
    /* Only the handle holds it: the moved entry's reference was given back. */
    assert_int_equal(atomic_load(&t->refs), 1);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* Two later moves at once: the first compared its deadline (+500 ms) with
 * the one it read and paused; the second moved the timeout to +10 s, and
 * the worker, at the old slot, filed it again by that. The first then wrote
 * +500 ms over it as a later move (the generation check passed on a retry)
 * and returned true: due at +500 ms, the timeout sat in the +10 s slot.
 * Its write is now a CAS from what it compared with: it fails, and the
 * call, comparing again, goes the earlier way, which tells the worker. */
static void test_two_later_moves_at_once_leave_it_due_at_the_last(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 512));
    atomic_int ran = 0;
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 300, HWT_MILLISECONDS, &t), 0);
    /* In the wheel, so that the later deadline is found at the old slot
     * (one still queued is filed by its deadline as the worker moves it). */
    expect_in_wheel(t);
    uint64_t refiled = atomic_load(&timer->refiled);
    arm(HWT_STEP_RESCHEDULE_COMPARED, timer);
    struct call first;
    begin_reschedule(&first, t, 500); /* later than the first deadline */
    expect_reached(HWT_STEP_RESCHEDULE_COMPARED);
    assert_true(hwt_timeout_reschedule(t, 10, HWT_SECONDS)); /* the gate is spent: no pause */
    /* the worker reaches the old slot (300 ms) and files it again at +10 s */
    assert_true(hwtt_wait_until(atomic_load(&timer->refiled) > refiled, hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_COMPARED);
    assert_true(finish_reschedule(&first)); /* the last to write: due at +500 ms */
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(3000)));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* A later move that loses to expiry returns false, "nothing changed": it
 * used to leave its deadline written (an hour on), and the executor's run
 * then measured the task's lateness against it: late_max_ns stayed 0. */
static _Atomic(hwt_timeout *) handed_over;
static _Atomic int64_t deadline_at_hand_over;

static void holding_executor(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    atomic_store(&deadline_at_hand_over, hwt__deadline_of(timeout));
    atomic_store(&handed_over, timeout);
}


/* Writes that the worker acts on only once every call writing at once has
 * finished: A (+50 ms) claims and pauses before its write; B (+30 s) claims
 * too, writes, and returns true; A writes, and pauses before it finishes.
 * The worker, held in a task until then, takes B's entry: it found the
 * timeout not BUSY (B had released it, A's claim had been taken over), ran
 * it by A's +50 ms, and A, finding it expired, returned false: the one true
 * result (B's +30 s) saw the task run 30 s early. Now the worker defers it
 * while A writes; A returns true, and the task runs by A's deadline, the
 * last written. */
static _Atomic int64_t ran_at_ns;

static void note_run_time(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&ran_at_ns, hwtt_now_ns());
}

static void test_the_worker_waits_for_every_call_writing_at_once(void **state)
{
    (void)state;
    atomic_store(&hold_started, false);
    atomic_store(&hold_released, false);
    atomic_store(&ran_at_ns, 0);
    hwt_timer *timer = new_timer();
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, note_run_time, NULL, 1, HWT_HOURS, &t), 0);
    expect_in_wheel(t);
    assert_int_equal(hwt_new_timeout(timer, hold_worker, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&hold_started), hwtt_slack_ms(5000)));
    arm(HWT_STEP_RESCHEDULE_CLAIMING, timer);
    struct call a;
    int64_t a_called = hwtt_now_ns();
    begin_reschedule(&a, t, 50);
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMING);
    assert_true(hwt_timeout_reschedule(t, 30, HWT_SECONDS));
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    open_gate(HWT_STEP_RESCHEDULE_CLAIMING);
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED); /* A wrote +50 ms */
    watch(HWT_STEP_WORKER_DEFERS, timer);
    atomic_store(&hold_released, true); /* the worker takes B's entry */
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_WORKER_DEFERS].arrivals) > 0 ||
                                    atomic_load(&ran_at_ns) != 0,
                                hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    bool a_result = finish_reschedule(&a);
    assert_true(hwtt_wait_until(atomic_load(&ran_at_ns) != 0, hwtt_slack_ms(3000)));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
    if (!a_result)
        fail_msg("A (+50 ms) returned false, B (+30 s) true, and the task ran %lld ms after A's "
                 "call",
                 (long long)((atomic_load(&ran_at_ns) - a_called) / 1000000));
    assert_true(atomic_load(&ran_at_ns) - a_called >= 50 * INT64_C(1000000));
}

/* With an executor: A (+50 min, earlier than the hour: the claimed way)
 * pauses before its write; B (+10 ms) claims too and returns true. The
 * worker ran the timeout at +10 ms, B's deadline, and A then wrote +50 min
 * and returned false with its deadline left written: the executor's run
 * measured the task's lateness against it. Now the timeout waits for A,
 * which writes last and returns true: due at +50 min, nothing is handed
 * over. */
static void test_a_call_writing_while_another_finishes_is_not_lost_to_expiry(void **state)
{
    (void)state;
    atomic_store(&handed_over, NULL);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.executor = holding_executor;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    atomic_int runs = 0;
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &runs, 1, HWT_HOURS, &t), 0);
    expect_in_wheel(t);
    arm(HWT_STEP_RESCHEDULE_CLAIMING, timer);
    struct call a;
    begin_reschedule(&a, t, 50 * 60 * 1000);
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMING);
    int64_t b_called = hwt__rel_now(timer);
    watch(HWT_STEP_WORKER_DEFERS, timer);
    assert_true(hwt_timeout_reschedule(t, 10, HWT_MILLISECONDS));
    /* Past B's deadline, the worker has looked at the timeout (or run it). */
    assert_true(hwtt_wait_until(
        (hwt__rel_now(timer) > b_called + 30 * INT64_C(1000000) &&
         atomic_load(&gates[HWT_STEP_WORKER_DEFERS].arrivals) > 0) ||
            atomic_load(&handed_over) != NULL,
        hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_CLAIMING);
    assert_true(finish_reschedule(&a)); /* written last */
    assert_null(atomic_load(&handed_over));
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_true(hwt__deadline_of(t) > b_called + 40 * 60 * INT64_C(1000000000));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&runs), 0);
}

/* A timer whose executor holds what expires, a timeout of it due in 30 ms
 * (its task counts into *ran), and a move of it an hour later, on a thread
 * of its own, paused after its comparison. */
static hwt_timer *a_later_move_paused(struct call *later, hwt_timeout **t, atomic_int *ran)
{
    atomic_store(&handed_over, NULL);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.executor = holding_executor;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, ran, 30, HWT_MILLISECONDS, t), 0);
    arm(HWT_STEP_RESCHEDULE_COMPARED, timer);
    begin_reschedule(later, *t, 3600 * 1000);
    expect_reached(HWT_STEP_RESCHEDULE_COMPARED);
    return timer;
}

static void test_a_later_move_that_loses_to_expiry_changes_nothing(void **state)
{
    (void)state;
    atomic_int ran = 0;
    hwt_timeout *t;
    struct call later;
    hwt_timer *timer = a_later_move_paused(&later, &t, &ran);
    assert_true(hwtt_wait_until(atomic_load(&handed_over) != NULL, hwtt_slack_ms(5000)));
    open_gate(HWT_STEP_RESCHEDULE_COMPARED);
    assert_false(finish_reschedule(&later));
    assert_true(hwt__deadline_of(t) == atomic_load(&deadline_at_hand_over));
    const int64_t late_ms = 20;
    hwtt_sleep_ms(late_ms); /* the task starts at least this late */
    hwt_timeout_run(t);
    assert_int_equal(atomic_load(&ran), 1);
    hwt_stats stats;
    hwt_timer_stats(timer, &stats);
    assert_true(stats.late_max_ns >= (uint64_t)late_ms * 1000000);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* A later move paused after its comparison while another later move wins
 * and the worker expires the timeout by the winner's deadline: the paused
 * move used to store its own deadline over the winner's, then, failing,
 * put back the one it had read (older still). The executor's run measured
 * the task against that: a task a few ms late read 380 ms late. Its write
 * is now a CAS from what it compared with, which fails: nothing changes. */
static void test_a_losing_later_move_leaves_the_winners_deadline(void **state)
{
    (void)state;
    atomic_int ran = 0;
    hwt_timeout *t;
    struct call loser;
    hwt_timer *timer = a_later_move_paused(&loser, &t, &ran);
    assert_true(hwt_timeout_reschedule(t, 400, HWT_MILLISECONDS)); /* the gate is spent */
    int64_t winner = hwt__deadline_of(t);
    assert_true(hwtt_wait_until(atomic_load(&handed_over) != NULL, hwtt_slack_ms(5000)));
    assert_true(atomic_load(&deadline_at_hand_over) == winner);
    open_gate(HWT_STEP_RESCHEDULE_COMPARED);
    assert_false(finish_reschedule(&loser));
    assert_true(hwt__deadline_of(t) == winner);
    hwt_timeout_run(t); /* at once: the task is a few ms late at most */
    assert_int_equal(atomic_load(&ran), 1);
    hwt_stats stats;
    hwt_timer_stats(timer, &stats);
    assert_true(stats.late_max_ns < (uint64_t)hwtt_slack_ms(100) * 1000000);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* A move later takes one CAS, on the deadline alone, and the worker claims
 * a due deadline (one CAS) before it marks the timeout expired (worker.c,
 * expire). Three calls that meet the worker between the two. */
static const hwt_task noting_run_time = {.run = note_run_time};

static hwt_timer *a_timeout_the_worker_holds(hwt__step step, hwt_timeout **t, const hwt_task *task,
                                             void *arg)
{
    atomic_store(&ran_at_ns, 0);
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 512));
    arm(step, timer);
    assert_int_equal(hwt_new_timeout_task(timer, task, arg, 30, HWT_MILLISECONDS, t), 0);
    expect_reached(step);
    return timer;
}

/* Moves the timeout the worker holds at `step` 200 ms on (true), lets the
 * worker go on, and checks that the task ran by the move's deadline, not
 * before. How many times the move went the BUSY way. */
static unsigned move_later_while_held(hwt_timer *timer, hwt_timeout *t, hwt__step step)
{
    watch(HWT_STEP_RESCHEDULE_CLAIMING, timer);
    int64_t moved_at = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(t, 200, HWT_MILLISECONDS));
    unsigned busy = atomic_load(&gates[HWT_STEP_RESCHEDULE_CLAIMING].arrivals);
    open_gate(step);
    assert_true(hwtt_wait_until(atomic_load(&ran_at_ns) != 0, hwtt_slack_ms(5000)));
    assert_true(atomic_load(&ran_at_ns) - moved_at >= 200 * INT64_C(1000000));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
    return busy;
}

/* Found due, its deadline not yet claimed: the move's CAS wins, the one
 * atomic operation of the call (no BUSY claim); the claim then fails, the
 * worker reads the later deadline and files the timeout again. Without the
 * claim, the worker's CAS on the state (which a move later no longer
 * changes) ran the task by the old deadline. */
static void test_a_later_move_before_the_worker_claims_wins(void **state)
{
    (void)state;
    hwt_timeout *t;
    hwt_timer *timer =
        a_timeout_the_worker_holds(HWT_STEP_WORKER_EXPIRING, &t, &noting_run_time, NULL);
    assert_int_equal(move_later_while_held(timer, t, HWT_STEP_WORKER_EXPIRING), 0);
}

/* The deadline claimed, the timeout not yet marked expired: the move's CAS
 * fails on the claim and it goes the BUSY way, which makes the worker's CAS
 * on the state fail; the worker reads the move's deadline and files the
 * timeout again. A move that took the claimed word for a deadline wrote
 * over the claim, and the worker ran the task by the old deadline. */
static void test_a_later_move_after_the_worker_claimed_wins(void **state)
{
    (void)state;
    hwt_timeout *t;
    hwt_timer *timer =
        a_timeout_the_worker_holds(HWT_STEP_WORKER_CLAIMED, &t, &noting_run_time, NULL);
    assert_int_equal(move_later_while_held(timer, t, HWT_STEP_WORKER_CLAIMED), 1);
}

/* A cancel while the worker holds its claim wins: the task never runs, the
 * cancelled callback runs once, and the claim is taken back. */
static void test_a_cancel_while_the_worker_claims_wins(void **state)
{
    (void)state;
    hwtt_rec rec = {0};
    hwt_timeout *t;
    hwt_timer *timer = a_timeout_the_worker_holds(HWT_STEP_WORKER_CLAIMED, &t, &hwtt_rec_task, &rec);
    assert_true(hwt_timeout_cancel(t));
    open_gate(HWT_STEP_WORKER_CLAIMED);
    assert_true(hwtt_wait_until(atomic_load(&rec.cb) == 1, hwtt_slack_ms(5000)));
    assert_false(hwt__deadline_claimed(hwt__deadline_word(t)));
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&rec.ran), 0);
    assert_int_equal(atomic_load(&rec.cb), 1);
    hwt_timeout_release(t);
}

/* The worker finds a timeout's slot due while a reschedule holds it BUSY,
 * and a cancel wins before it defers the timeout: the canceller has pushed
 * the timeout's one stack link on its cancel stack, on top of another
 * cancelled timeout. Deferring it used to push the same link on the moved
 * stack, cutting the other off the cancel stack: its cancelled callback
 * never ran, and a stop then waited for it forever. */
static void test_a_cancel_before_the_worker_defers_a_timeout_loses_no_other(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    hwtt_rec rec_t = {0}, rec_other = {0};
    hwt_timeout *t, *other;
    /* Due only once the reschedule below holds it: a slow machine may take
     * a while to get there, and the slot must not come first. */
    int64_t due_ms = hwtt_slack_ms(1000);
    assert_int_equal(
        hwt_new_timeout_task(timer, &hwtt_rec_task, &rec_t, due_ms, HWT_MILLISECONDS, &t), 0);
    assert_int_equal(
        hwt_new_timeout_task(timer, &hwtt_rec_task, &rec_other, 1, HWT_HOURS, &other), 0);
    expect_in_wheel(t);
    expect_in_wheel(other);
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    struct call earlier;
    begin_reschedule(&earlier, t, 0); /* earlier: held BUSY */
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED);
    arm(HWT_STEP_WORKER_DEFERS, timer); /* at its slot */
    expect_reached(HWT_STEP_WORKER_DEFERS);
    assert_true(hwt_timeout_cancel(other));
    assert_true(hwt_timeout_cancel(t)); /* pushed on top of `other` */
    open_gate(HWT_STEP_WORKER_DEFERS);
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    assert_false(finish_reschedule(&earlier)); /* the cancel won */
    assert_true(hwtt_wait_until(atomic_load(&rec_t.cb) == 1 && atomic_load(&rec_other.cb) == 1,
                                hwtt_slack_ms(5000)));
    struct call stop;
    begin(&stop, timer, OP_STOP_LIST, NULL);
    finish(&stop);
    assert_int_equal(stop.rc, 0);
    assert_int_equal(stop.count, 0);
    assert_int_equal(atomic_load(&rec_t.ran) + atomic_load(&rec_other.ran), 0);
    assert_int_equal(atomic_load(&rec_t.cb) + atomic_load(&rec_other.cb), 2);
    hwt_timeout_release(t);
    hwt_timeout_release(other);
    hwtt_destroy(timer);
}

/* The worker defers a timeout whose reschedule has set MOVED and not yet
 * pushed it: the timeout is in no bucket, no queue, on no stack, until
 * that push. A stop then must wait for it: the drain used to end without
 * it, and the push came after, to a stack nobody read: the timeout never
 * ended. */
static void test_a_stop_waits_for_a_deferred_timeout_still_being_pushed(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer();
    hwtt_rec rec = {0};
    hwt_timeout *t;
    /* Due only once the reschedule below holds it: a slow machine may take
     * a while to get there, and the slot must not come first. */
    int64_t due_ms = hwtt_slack_ms(1000);
    assert_int_equal(
        hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, due_ms, HWT_MILLISECONDS, &t), 0);
    expect_in_wheel(t);
    arm(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    struct call earlier;
    begin_reschedule(&earlier, t, 0); /* earlier: held BUSY */
    expect_reached(HWT_STEP_RESCHEDULE_CLAIMED);
    arm(HWT_STEP_WORKER_DEFERS, timer);
    expect_reached(HWT_STEP_WORKER_DEFERS);
    arm(HWT_STEP_RESCHEDULE_TOLD, timer);
    open_gate(HWT_STEP_RESCHEDULE_CLAIMED);
    expect_reached(HWT_STEP_RESCHEDULE_TOLD); /* MOVED set, not pushed */
    open_gate(HWT_STEP_WORKER_DEFERS);
    watch(HWT_STEP_DRAIN_WAITS, timer);
    arm(HWT_STEP_WORKER_DRAINED, timer);
    struct call stop;
    begin(&stop, timer, OP_STOP_LIST, NULL);
    assert_true(hwtt_wait_until(atomic_load(&gates[HWT_STEP_DRAIN_WAITS].arrivals) > 0 ||
                                    atomic_load(&gates[HWT_STEP_WORKER_DRAINED].reached),
                                hwtt_slack_ms(5000)));
    if (atomic_load(&gates[HWT_STEP_WORKER_DRAINED].reached))
        fail_msg("the drain ended while a deferred timeout was still being pushed");
    open_gate(HWT_STEP_RESCHEDULE_TOLD);
    assert_true(finish_reschedule(&earlier));
    expect_reached(HWT_STEP_WORKER_DRAINED);
    open_gate(HWT_STEP_WORKER_DRAINED);
    finish(&stop);
    assert_int_equal(stop.rc, 0);
    assert_int_equal(stop.count, 1);
    assert_ptr_equal(stop.list[0], t);
    hwt_timeouts_release(stop.list, stop.count);
    assert_int_equal(atomic_load(&rec.ran) + atomic_load(&rec.cb), 0);
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* ----------------------------------------------------------- wake-ups */

/* A timer whose wheel reaches 80 s at level 0, so that a far timeout is
 * its next event and the worker plans to sleep until it. */
static hwt_timer *far_sleeping_timer(uint32_t max_transfers)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.ticks_per_wheel = 8192;
    o.max_transfers_per_tick = max_transfers;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* Pauses the worker, at the step after it bumped the futex word (its key),
 * in the first pass that plans to sleep past the cancel latency
 * (cancel_watch 0) until a deadline 10 s on or later: it schedules a
 * timeout 20 s on. Other passes go on: the first, which may come before
 * that timeout is queued and plan to sleep until woken, and any that moves
 * it. */
static void pause_in_a_far_plan(hwt__step step, void *timer)
{
    if (step != HWT_STEP_WORKER_PLANNED) /* some steps have no timer */
        return;
    hwt_timer *t = timer;
    int64_t wake_before = atomic_load(&t->wake_before);
    if (!atomic_load(&t->cancel_watch) && wake_before > hwt__rel_now(t) + INT64_C(10000000000) &&
        wake_before != INT64_MAX)
        step_hook(step, timer);
}

static void pause_worker_before_a_far_sleep(hwt_timer *timer)
{
    hwt__set_step_hook(pause_in_a_far_plan);
    arm(HWT_STEP_WORKER_PLANNED, timer);
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 20, HWT_SECONDS, NULL), 0);
    expect_reached(HWT_STEP_WORKER_PLANNED);
}

/* With the worker let go to its far sleep: a timeout due in 50 ms runs in
 * time. The short wait lets the worker reach its sleep first, so that the
 * test sees a lost wake-up; with none it passes either way. */
static void expect_a_near_timeout_in_time(hwt_timer *timer)
{
    open_gate(HWT_STEP_WORKER_PLANNED);
    hwt__set_step_hook(step_hook);
    hwtt_sleep_ms(50);
    atomic_int ran = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 50, HWT_MILLISECONDS, NULL), 0);
    if (!hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(2000)))
        fail_msg("a timeout due in 50 ms did not run within 2 s: the worker sleeps until "
                 "%lld ms, kicked %u, wake_seq %u",
                 (long long)(atomic_load(&timer->wake_before) / 1000000),
                 (unsigned)atomic_load(&timer->kicked), (unsigned)atomic_load(&timer->wake_seq));
}

/* A cancel of a still-queued timeout without a cancelled callback is not
 * pushed, and it kicks the worker (which plans past the latency). The kick
 * came after the worker cleared kicked and before it read the futex word
 * (as the worker then planned): the wake was absorbed, the worker's recheck
 * saw nothing to do, and it slept with kicked set, so that every later waker
 * made no call: a timeout due in 50 ms waited for the far wake-up. */
static void test_a_kick_before_the_worker_sleeps_is_not_lost(void **state)
{
    (void)state;
    hwt_timer *timer = far_sleeping_timer(100000);
    pause_worker_before_a_far_sleep(timer);
    hwt_timeout *queued;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 40, HWT_SECONDS, &queued), 0);
    assert_true(hwt_timeout_cancel(queued)); /* not pushed: kicks */
    hwt_timeout_release(queued);
    assert_int_equal(atomic_load(&timer->kicked), atomic_load(&timer->wake_seq)); /* noted */
    expect_a_near_timeout_in_time(timer);
    hwtt_destroy(timer);
}

/* A waker preempted in its kick (as if stopped there, after its bump and
 * before its wake-up call), the worker asleep far: every later waker saw
 * the flag the first had set before its bump and made no call, so a
 * timeout due in 50 ms waited for the first waker to go on. */
static void *cancel_a_queued_timeout(void *p)
{
    hwt_timeout *t = p;
    bool cancelled = hwt_timeout_cancel(t); /* not pushed: kicks */
    hwt_timeout_release(t);
    return cancelled ? NULL : p;
}

static void test_a_waker_held_in_its_kick_silences_no_other(void **state)
{
    (void)state;
    hwt_timer *timer = far_sleeping_timer(100000);
    pause_worker_before_a_far_sleep(timer);
    hwt_timeout *queued;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 40, HWT_SECONDS, &queued), 0);
    /* The worker goes to its far sleep; then the canceller kicks, held. */
    open_gate(HWT_STEP_WORKER_PLANNED);
    hwt__set_step_hook(step_hook);
    hwtt_sleep_ms(50);
    arm(HWT_STEP_KICKING, timer);
    pthread_t canceller;
    assert_int_equal(pthread_create(&canceller, NULL, cancel_a_queued_timeout, queued), 0);
    expect_reached(HWT_STEP_KICKING);
    atomic_int ran = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 50, HWT_MILLISECONDS, NULL), 0);
    bool in_time = hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(2000));
    open_gate(HWT_STEP_KICKING);
    void *failed;
    pthread_join(canceller, &failed);
    assert_null(failed);
    assert_true(in_time);
    hwtt_destroy(timer);
}

/* The same with the backlog kick: a thread's schedule that finds a budget
 * queued (500) while the worker plans past the latency kicks it; the
 * worker's recheck only looked for the larger backlog_kick. */
static void *schedule_a_check_interval_far(void *p)
{
    hwt_timer *timer = p;
    for (int i = 0; i < HWT_BACKLOG_CHECK_EVERY; i++)
        if (hwt_new_timeout(timer, hwtt_count_task, NULL, 40, HWT_SECONDS, NULL) != 0)
            return p;
    return NULL;
}

static void test_a_backlog_kick_before_the_worker_sleeps_is_not_lost(void **state)
{
    (void)state;
    hwt_timer *timer = far_sleeping_timer(500);
    pause_worker_before_a_far_sleep(timer);
    pthread_t producer; /* a new thread: its count of schedules starts at 0 */
    assert_int_equal(pthread_create(&producer, NULL, schedule_a_check_interval_far, timer), 0);
    void *failed;
    pthread_join(producer, &failed);
    assert_null(failed);
    assert_int_equal(atomic_load(&timer->kicked), atomic_load(&timer->wake_seq)); /* noted */
    expect_a_near_timeout_in_time(timer);
    hwtt_destroy(timer);
}

static void test_lifecycle_races_at_full_speed(void **state)
{
    (void)state;
    hwt__set_step_hook(NULL);
    int rounds = hwtt_slowdown() > 1 ? ROUNDS / 10 : ROUNDS;
    for (int round = 0; round < rounds; round++) {
        hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 64);
        hwtt_rec rec = {0};
        pthread_barrier_t barrier;
        pthread_barrier_init(&barrier, NULL, 4);
        struct racer r[4] = {
            {.timer = timer, .barrier = &barrier, .op = OP_START},
            {.timer = timer, .barrier = &barrier, .op = OP_SCHEDULE, .rec = &rec},
            {.timer = timer, .barrier = &barrier, .op = round % 2 ? OP_STOP_LIST : OP_STOP_DROP},
            {.timer = timer, .barrier = &barrier, .op = OP_STOP_LIST},
        };
        pthread_t th[4];
        for (int i = 0; i < 4; i++)
            assert_int_equal(pthread_create(&th[i], NULL, racer_main, &r[i]), 0);
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&barrier);
        assert_true(r[0].rc == 0 || r[0].rc == HWT_ESTOPPED);
        assert_int_equal(r[2].rc, 0);
        assert_int_equal(r[3].rc, 0);
        assert_int_equal(hwt_pending_timeouts(timer), 0);
        size_t handed = r[2].count + r[3].count;
        hwt_timeouts_release(r[2].list, r[2].count);
        hwt_timeouts_release(r[3].list, r[3].count);
        hwt_timer_destroy(timer);
        /* Each scheduled one ran, was dropped (its callback), or was handed back. */
        assert_int_equal(atomic_load(&rec.ran) + atomic_load(&rec.cb) + (int)handed,
                         r[1].scheduled);
    }
    hwt__set_step_hook(step_hook);
}

int main(void)
{
    hwtt_watchdog(300);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stop_while_the_worker_announces_itself, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stop_between_spawn_and_latch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_between_latch_and_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_stops_during_a_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_while_a_start_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ticks_never_go_back_when_a_read_meets_the_stop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_destroy_during_the_first_schedule_frees_nothing_under_it, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_destroy_during_a_threads_first_schedule_frees_nothing_under_it, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_child_forked_during_a_start_counts_the_workers_ticks,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_child_forked_during_a_destroy_counts_its_live_timers,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_is_zero_after_stop_while_a_schedule_fails,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop_waits_for_an_announced_schedule, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_schedule_failing_during_the_count_hides_no_other,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_in_start_latch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_in_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_after_a_failed_hand_back_callbacks_run_on_the_worker,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_destroy_waiting_for_a_failing_list_stop_ends_the_timeouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_after_a_failed_hand_back_the_next_stop_hands_back,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_an_overdue_timeout_taken_while_rescheduled_runs_once,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_reschedule_that_takes_over_another_has_the_timeout_filed_again, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_reschedule_held_in_its_write_leaves_the_worker_asleep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_cancel_while_a_reschedule_pushes_is_heard_in_time,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_move_earlier_while_another_pushes_runs_in_time,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_worker_waits_for_every_call_writing_at_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_a_call_writing_while_another_finishes_is_not_lost_to_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_reschedule_goes_through_seven_held_in_their_write,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_move_told_after_the_timeout_ran_is_not_left_behind,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_later_moves_at_once_leave_it_due_at_the_last,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_later_move_that_loses_to_expiry_changes_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_losing_later_move_leaves_the_winners_deadline, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_later_move_before_the_worker_claims_wins, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_later_move_after_the_worker_claimed_wins, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_cancel_while_the_worker_claims_wins, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_a_cancel_before_the_worker_defers_a_timeout_loses_no_other, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_stop_waits_for_a_deferred_timeout_still_being_pushed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_waker_held_in_its_kick_silences_no_other, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_kick_before_the_worker_sleeps_is_not_lost, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_backlog_kick_before_the_worker_sleeps_is_not_lost,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_lifecycle_races_at_full_speed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
