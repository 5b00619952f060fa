/*
 * test_timing.c - SPEC.md section 3's timing rules: deadlines are never early
 * and nominally before deadline + tick; zero and negative delays fire on the
 * next tick; unit conversion (and its saturation); run order; sub-millisecond
 * ticks; far-future timeouts and timeouts several wheel revolutions away.
 *
 * Each probe records when it was scheduled (just before hwt_new_timeout, so
 * the library's own "now" is later) and when its task ran. "Never early"
 * (run - scheduled >= delay) is checked strictly; upper bounds get generous
 * slack, scaled by hwtt_slowdown() on slow builds.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US INT64_C(1000)
#define MS INT64_C(1000000)
#define SEC INT64_C(1000000000)

/* Base upper-bound slack, in ms, before hwtt_slowdown() scaling. */
#define SLACK_MS 300

/* ------------------------------------------------------------ probes */

typedef struct probe {
    int64_t sched_ns;  /* test thread only */
    int64_t queued_ns; /* test thread only: when hwt_new_timeout returned */
    int64_t delay_ns;  /* test thread only; INT64_MAX: must never run */
    atomic_llong run_ns;
    atomic_int runs;
    atomic_int seq; /* position in the global run order */
} probe;

#define NPROBES 2200
static probe g_p[NPROBES];
static atomic_int g_seq;  /* run order */
static atomic_int g_runs; /* all runs */

static void probe_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    probe *p = arg;
    atomic_store(&p->run_ns, hwtt_now_ns());
    atomic_store(&p->seq, atomic_fetch_add(&g_seq, 1));
    atomic_fetch_add(&p->runs, 1);
    atomic_fetch_add(&g_runs, 1);
}

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < NPROBES; i++) {
        g_p[i].sched_ns = 0;
        g_p[i].delay_ns = 0;
        atomic_store(&g_p[i].run_ns, 0);
        atomic_store(&g_p[i].runs, 0);
        atomic_store(&g_p[i].seq, -1);
    }
    atomic_store(&g_seq, 0);
    atomic_store(&g_runs, 0);
    return 0;
}

static hwt_timer *mk(int64_t tick, hwt_unit unit, uint32_t wheel, hwt_sleep_mode mode)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = (uint64_t)tick;
    o.tick_unit = unit;
    o.ticks_per_wheel = wheel;
    o.sleep_mode = mode;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* Schedules probe p: `delay` `unit`s, which is `delay_ns` nanoseconds. */
static void sched(hwt_timer *timer, probe *p, int64_t delay, hwt_unit unit, int64_t delay_ns)
{
    p->delay_ns = delay_ns;
    p->sched_ns = hwtt_now_ns();
    int rc = hwt_new_timeout(timer, probe_run, p, delay, unit, NULL);
    p->queued_ns = hwtt_now_ns();
    if (rc != 0)
        fail_msg("hwt_new_timeout(%lld, unit %d): %d (%s)", (long long)delay, (int)unit, rc,
                 hwt_strerror(rc));
}

static void sched_ns(hwt_timer *timer, probe *p, int64_t delay_ns)
{
    sched(timer, p, delay_ns, HWT_NANOSECONDS, delay_ns);
}

static int runs_of(int from, int n)
{
    int sum = 0;
    for (int i = from; i < from + n; i++)
        sum += atomic_load(&g_p[i].runs);
    return sum;
}

/* Waits until probes [from, from+n) all ran, then checks each ran exactly once,
 * not before its delay (negative delays count as 0), and not after
 * delay + tick + slack. */
static void check_window(int from, int n, int64_t tick_ns, int64_t slack_ms)
{
    int64_t max_delay = 0;
    for (int i = from; i < from + n; i++)
        max_delay = g_p[i].delay_ns > max_delay ? g_p[i].delay_ns : max_delay;
    bool all = hwtt_wait_until(runs_of(from, n) == n,
                               max_delay / MS + tick_ns / MS + 2 * hwtt_slack_ms(slack_ms) + 1000);
    if (!all)
        fail_msg("only %d of %d timeouts ran", runs_of(from, n), n);
    for (int i = from; i < from + n; i++) {
        probe *p = &g_p[i];
        int64_t delay = p->delay_ns < 0 ? 0 : p->delay_ns;
        int64_t took = atomic_load(&p->run_ns) - p->sched_ns;
        if (atomic_load(&p->runs) != 1)
            fail_msg("probe %d (delay %lld ns) ran %d times", i, (long long)p->delay_ns,
                     atomic_load(&p->runs));
        if (took < delay)
            fail_msg("probe %d ran early: %lld ns after scheduling, delay %lld ns (tick %lld ns)",
                     i, (long long)took, (long long)p->delay_ns, (long long)tick_ns);
        if (took > delay + tick_ns + hwtt_slack_ms(slack_ms) * MS)
            fail_msg("probe %d ran late: %lld ns after scheduling, delay %lld ns, tick %lld ns, "
                     "slack %lld ms",
                     i, (long long)took, (long long)p->delay_ns, (long long)tick_ns,
                     (long long)hwtt_slack_ms(slack_ms));
    }
}

/* Stops with a list, checks the list holds exactly the probes [from, from+n)
 * (each cancelled, none run), and releases it. */
static void stop_expect(hwt_timer *timer, int from, int n)
{
    hwt_timeout **list = NULL;
    size_t count = 0;
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        probe *p = hwt_timeout_arg(list[i]);
        if (p < &g_p[from] || p >= &g_p[from + n] || !hwt_timeout_is_cancelled(list[i]) ||
            hwt_timeout_is_expired(list[i]))
            bad++;
    }
    hwt_timeouts_release(list, count);
    assert_int_equal(count, (size_t)n);
    assert_int_equal(bad, 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
}

static int64_t median(int64_t *v, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort: n is small */
        int64_t x = v[i];
        int j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    return v[n / 2];
}

/* ------------------------------------------------------ never early */

static const int64_t g_delays[] = {0,       1 * MS,  1500 * US, 2 * MS,  2500 * US, 3 * MS,
                                   5 * MS,  7 * MS,  10 * MS,   15 * MS, 20 * MS,   33 * MS,
                                   50 * MS, 75 * MS, 100 * MS,  150 * MS};
#define NDELAYS ((int)(sizeof g_delays / sizeof g_delays[0]))

static void never_early_case(int64_t tick_ns, hwt_sleep_mode mode)
{
    hwt_timer *timer = mk(tick_ns, HWT_NANOSECONDS, 512, mode);
    for (int i = 0; i < NDELAYS; i++)
        sched_ns(timer, &g_p[i], g_delays[i]);
    check_window(0, NDELAYS, tick_ns, SLACK_MS);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

static void test_never_early_1ms_tick(void **state)
{
    (void)state;
    never_early_case(1 * MS, HWT_SLEEP_PRECISE);
}

static void test_never_early_10ms_tick(void **state)
{
    (void)state;
    never_early_case(10 * MS, HWT_SLEEP_PRECISE);
}

static void test_never_early_100us_tick(void **state)
{
    (void)state;
    never_early_case(100 * US, HWT_SLEEP_PRECISE);
}

static void test_never_early_odd_tick(void **state)
{
    (void)state;
    never_early_case(7 * MS + 300 * US, HWT_SLEEP_DEFAULT);
}

/* Many delays, scheduled at once, in microseconds. */
static void test_never_early_random_delays(void **state)
{
    (void)state;
    enum { N = 400 };
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 64, HWT_SLEEP_PRECISE);
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        int64_t us = (int64_t)((x >> 8) % 80000); /* 0 .. 80 ms */
        sched(timer, &g_p[i], us, HWT_MICROSECONDS, us * US);
    }
    check_window(0, N, 1 * MS, SLACK_MS);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

/* A coarse tick: fires in [delay, delay + tick + slack]. */
static void test_coarse_tick_window(void **state)
{
    (void)state;
    hwt_timer *timer = mk(200, HWT_MILLISECONDS, 8, HWT_SLEEP_PRECISE);
    sched(timer, &g_p[0], 250, HWT_MILLISECONDS, 250 * MS);
    sched(timer, &g_p[1], 450, HWT_MILLISECONDS, 450 * MS);
    sched(timer, &g_p[2], 10, HWT_MILLISECONDS, 10 * MS);
    check_window(0, 3, 200 * MS, SLACK_MS);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

/* ---------------------------------------------- zero and negative delays */

static void zero_and_negative(hwt_timer *timer, int from)
{
    sched(timer, &g_p[from + 0], 0, HWT_MILLISECONDS, 0);
    sched(timer, &g_p[from + 1], -1, HWT_NANOSECONDS, -1);
    sched(timer, &g_p[from + 2], -1, HWT_MILLISECONDS, -1 * MS);
    sched(timer, &g_p[from + 3], -5, HWT_SECONDS, -5 * SEC);
    sched(timer, &g_p[from + 4], 0, HWT_DAYS, 0);
    sched(timer, &g_p[from + 5], -1, HWT_DAYS, -1);
}

static void test_zero_and_negative_delays_fire_next_tick(void **state)
{
    (void)state;
    hwt_timer *timer = mk(100, HWT_MILLISECONDS, 512, HWT_SLEEP_DEFAULT);
    zero_and_negative(timer, 0);
    check_window(0, 6, 100 * MS, SLACK_MS);

    /* Again once the worker is idle with only a far-future timeout: the new
     * earlier timeouts must wake it. */
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[100], 1, HWT_HOURS, NULL), 0);
    hwtt_sleep_ms(350);
    zero_and_negative(timer, 10);
    check_window(10, 6, 100 * MS, SLACK_MS);
    stop_expect(timer, 100, 1);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------ units */

static void test_units_convert(void **state)
{
    (void)state;
    const int64_t tick = 10 * MS;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 512, HWT_SLEEP_PRECISE);
    /* 250 ms three ways */
    sched(timer, &g_p[0], 250, HWT_MILLISECONDS, 250 * MS);
    sched(timer, &g_p[1], 250000, HWT_MICROSECONDS, 250 * MS);
    sched(timer, &g_p[2], 250000000, HWT_NANOSECONDS, 250 * MS);
    /* 1 s four ways */
    sched(timer, &g_p[3], 1, HWT_SECONDS, SEC);
    sched(timer, &g_p[4], 1000, HWT_MILLISECONDS, SEC);
    sched(timer, &g_p[5], 1000000, HWT_MICROSECONDS, SEC);
    sched(timer, &g_p[6], 1000000000, HWT_NANOSECONDS, SEC);
    /* 1.5 ms, below one tick of precision but never early */
    sched(timer, &g_p[7], 1500, HWT_MICROSECONDS, 1500 * US);
    sched(timer, &g_p[8], 1500000, HWT_NANOSECONDS, 1500 * US);
    /* negative minutes, hours, days: now */
    sched(timer, &g_p[9], -1, HWT_MINUTES, -60 * SEC);
    sched(timer, &g_p[10], -1, HWT_HOURS, -3600 * SEC);
    sched(timer, &g_p[11], -3, HWT_DAYS, -3 * 86400 * SEC);
    /* one minute, hour, day: not within this test */
    sched(timer, &g_p[20], 1, HWT_MINUTES, 60 * SEC);
    sched(timer, &g_p[21], 1, HWT_HOURS, 3600 * SEC);
    sched(timer, &g_p[22], 1, HWT_DAYS, 86400 * SEC);
    sched(timer, &g_p[23], 30, HWT_SECONDS, 30 * SEC);

    check_window(0, 12, tick, SLACK_MS);
    /* Same delay in different units: same tick (or the next, as scheduling
     * straddled a tick boundary). */
    for (int g = 0; g < 2; g++) {
        int from = g == 0 ? 0 : 3, n = g == 0 ? 3 : 4;
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (int i = from; i < from + n; i++) {
            int64_t r = atomic_load(&g_p[i].run_ns);
            lo = r < lo ? r : lo;
            hi = r > hi ? r : hi;
        }
        if (hi - lo > 2 * tick + hwtt_slack_ms(50) * MS)
            fail_msg("the same delay in different units ran %lld ns apart", (long long)(hi - lo));
    }
    assert_int_equal(runs_of(20, 4), 0);
    stop_expect(timer, 20, 4);
    hwtt_destroy(timer);
}

static void test_invalid_unit_rejected(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 64, HWT_SLEEP_DEFAULT);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 1, (hwt_unit)7, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 1, (hwt_unit)-1, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 1, (hwt_unit)1000, NULL),
                     HWT_EINVAL);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    sched(timer, &g_p[1], 5, HWT_MILLISECONDS, 5 * MS);
    check_window(1, 1, 10 * MS, SLACK_MS);
    assert_int_equal(atomic_load(&g_p[0].runs), 0);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------- saturation */

static void test_saturation_max_never_fires(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 512, HWT_SLEEP_PRECISE);
    int n = 0;
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++)
        sched(timer, &g_p[n++], INT64_MAX, (hwt_unit)u, INT64_MAX);
    const struct {
        int64_t v;
        hwt_unit u;
    } huge[] = {
        {INT64_MAX - 1, HWT_NANOSECONDS},
        {INT64_MAX / 1000 + 1, HWT_MICROSECONDS},    /* just overflows */
        {INT64_MAX / 1000000 + 1, HWT_MILLISECONDS}, /* just overflows */
        {INT64_MAX / 2, HWT_MICROSECONDS},
        {INT64_C(100000000000000000), HWT_SECONDS},
        {INT64_MAX / 1000000000 + 1, HWT_SECONDS},
        {INT64_C(1000000000000000), HWT_MINUTES},
        {INT64_C(1000000000000), HWT_HOURS},
        {INT64_MAX / (INT64_C(3600) * SEC) + 1, HWT_HOURS}, /* just overflows */
        {INT64_MAX / (INT64_C(3600) * SEC), HWT_HOURS},     /* ~292 years, does not */
        {INT64_MAX / 2, HWT_DAYS},
        {INT64_MAX / 86400, HWT_DAYS},
        {INT64_MAX / (INT64_C(86400) * SEC) + 1, HWT_DAYS}, /* just overflows */
        {INT64_MAX / (INT64_C(86400) * SEC), HWT_DAYS},     /* 106751 days, does not */
        {1000000, HWT_DAYS},
    };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
        sched(timer, &g_p[n++], huge[i].v, huge[i].u, INT64_MAX);
    /* A near one on the same wheel still fires on time. */
    sched(timer, &g_p[100], 20, HWT_MILLISECONDS, 20 * MS);
    check_window(100, 1, 10 * MS, SLACK_MS);

    assert_false(hwtt_wait_until(runs_of(0, n) != 0, 500));
    assert_int_equal(hwt_pending_timeouts(timer), n);
    stop_expect(timer, 0, n);
    assert_int_equal(runs_of(0, n), 0);
    hwtt_destroy(timer);
}

static void test_saturation_min_fires_promptly(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 512, HWT_SLEEP_PRECISE);
    int n = 0;
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++)
        sched(timer, &g_p[n++], INT64_MIN, (hwt_unit)u, INT64_MIN);
    sched(timer, &g_p[n++], -INT64_MAX, HWT_NANOSECONDS, INT64_MIN);
    sched(timer, &g_p[n++], INT64_MIN / 2, HWT_DAYS, INT64_MIN);
    sched(timer, &g_p[n++], INT64_MIN + 1, HWT_MICROSECONDS, INT64_MIN);
    sched(timer, &g_p[n++], -(INT64_MAX / (INT64_C(86400) * SEC)) - 1, HWT_DAYS, INT64_MIN);
    check_window(0, n, 10 * MS, SLACK_MS);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    stop_expect(timer, 0, 0);
    assert_int_equal(runs_of(0, n), n);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------ order */

/* Delays k * step (k = 1..n) scheduled in a scrambled order must run in
 * deadline order wherever the deadlines are two ticks or more apart - among
 * timeouts the worker could see (SPEC: "already moved into buckets"): i is
 * compared with j only if i was queued (hwt_new_timeout returned) before j's
 * deadline, since the worker's wake-up for j's tick transfers first. A test
 * thread preempted for longer than that is not a library fault.
 * The library reads the clock somewhere inside the call, so a deadline is
 * only known to lie in [sched_ns, queued_ns] + delay: i's latest possible
 * deadline is compared with j's earliest (a test thread preempted inside
 * the call otherwise looks like a misordering). */
static void order_case(int64_t tick_ns, uint32_t wheel, int64_t step_ns, int n)
{
    hwt_timer *timer = mk(tick_ns, HWT_NANOSECONDS, wheel, HWT_SLEEP_PRECISE);
    for (int i = 0; i < n; i++) {
        int k = (i * 7 + 3) % n; /* n is not a multiple of 7: a permutation */
        sched_ns(timer, &g_p[k], (k + 1) * step_ns);
    }
    check_window(0, n, tick_ns, SLACK_MS);
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            int64_t di = g_p[i].queued_ns + g_p[i].delay_ns, dj = g_p[j].sched_ns + g_p[j].delay_ns;
            if (di + 2 * tick_ns <= dj && g_p[i].queued_ns < dj &&
                atomic_load(&g_p[i].seq) > atomic_load(&g_p[j].seq)) {
                if (!wrong)
                    print_message("delay %lld ms ran after delay %lld ms\n",
                                  (long long)(g_p[i].delay_ns / MS),
                                  (long long)(g_p[j].delay_ns / MS));
                wrong++;
            }
        }
    }
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
    assert_int_equal(wrong, 0);
}

static void test_order_increasing_delays(void **state)
{
    (void)state;
    order_case(1 * MS, 512, 5 * MS, 20);
}

/* The same across several revolutions of a small wheel (4 x 2 ms = 8 ms). */
static void test_order_increasing_delays_small_wheel(void **state)
{
    (void)state;
    order_case(2 * MS, 4, 5 * MS, 24);
}

/* Delays up to 520 ticks on a 4-bucket wheel: most go through several
 * revolutions (and whatever the wheel does with far timeouts). */
static void test_order_increasing_delays_many_revolutions(void **state)
{
    (void)state;
    order_case(1 * MS, 4, 13 * MS, 40);
}

static void spin_us(int64_t us)
{
    int64_t end = hwtt_now_ns() + us * US;
    while (hwtt_now_ns() < end) {
    }
}

/* The same delay from one thread: scheduling order. With spread_us > 0 the
 * schedules are spread out (the worker moves some into the wheel while
 * others are still being scheduled). */
static void fifo_case(int64_t tick_ns, uint32_t wheel, int64_t delay_ns, int n, int64_t spread_us)
{
    hwt_timer *timer = mk(tick_ns, HWT_NANOSECONDS, wheel, HWT_SLEEP_PRECISE);
    for (int i = 0; i < n; i++) {
        sched_ns(timer, &g_p[i], delay_ns);
        if (spread_us > 0)
            spin_us(spread_us);
    }
    check_window(0, n, tick_ns, SLACK_MS);
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        if (atomic_load(&g_p[i].seq) != i) {
            if (!wrong)
                print_message("timeout #%d ran as #%d\n", i, atomic_load(&g_p[i].seq));
            wrong++;
        }
    }
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
    assert_int_equal(wrong, 0);
}

static void test_order_same_delay_is_scheduling_order(void **state)
{
    (void)state;
    fifo_case(10 * MS, 512, 50 * MS, 2000, 0);
}

static void test_order_same_delay_across_ticks(void **state)
{
    (void)state;
    fifo_case(100 * US, 512, 5 * MS, 2000, 0);
}

/* Same delay, 300 ticks away on a 4-bucket wheel, schedules spread over ~10
 * ticks: timeouts due in the same tick are moved into the wheel at different
 * times, relative to different current ticks. */
static void test_order_same_delay_small_wheel(void **state)
{
    (void)state;
    fifo_case(1 * MS, 4, 300 * MS, 1000, 10);
}

/* ---------------------------------------------------- sub-millisecond tick */

/* Median lateness of N timeouts 300 us - 1.7 ms away scheduled in a batch
 * (*batch), and of N/2 scheduled one at a time, each waking an idle worker
 * (*single), on a 100 us tick. */
static void sub_millisecond_lateness(int64_t *batch, int64_t *single)
{
    enum { N = 40 };
    const int64_t tick = 100 * US;
    hwt_timer *timer = mk(100, HWT_MICROSECONDS, 512, HWT_SLEEP_PRECISE);
    for (int i = 0; i < N; i++)
        sched(timer, &g_p[i], 300 + i * 37, HWT_MICROSECONDS, (300 + i * 37) * US);
    check_window(0, N, tick, SLACK_MS);
    int64_t late[N];
    for (int i = 0; i < N; i++)
        late[i] = atomic_load(&g_p[i].run_ns) - g_p[i].sched_ns - g_p[i].delay_ns;
    *batch = median(late, N);

    int64_t late1[N / 2];
    for (int i = 0; i < N / 2; i++) {
        sched(timer, &g_p[100 + i], 500, HWT_MICROSECONDS, 500 * US);
        check_window(100 + i, 1, tick, SLACK_MS);
        late1[i] = atomic_load(&g_p[100 + i].run_ns) - g_p[100 + i].sched_ns - 500 * US;
    }
    *single = median(late1, N / 2);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

/* A worker that sleeps to whole milliseconds is ~0.5 ms late on median (the
 * next millisecond boundary), so one timeout at a time must be under 300 us
 * on median (the 100 us tick's goal, issue 3); a batch, where every tick
 * wakes the worker, under 1 ms. A busy host can starve the worker for a
 * while, so each figure counts its best of five tries: a timer that cannot
 * sleep below a millisecond fails all five. */
static void test_sub_millisecond_tick(void **state)
{
    (void)state;
    const int64_t limit = hwtt_slack_ms(1) * MS, limit1 = hwtt_slowdown() * 300 * US;
    int64_t best = INT64_MAX, best1 = INT64_MAX;
    for (int attempt = 1; attempt <= 5 && (best > limit || best1 > limit1); attempt++) {
        int64_t med, med1;
        setup(NULL);
        sub_millisecond_lateness(&med, &med1);
        print_message("100 us tick, try %d: median lateness %lld us (batch), %lld us (one at a "
                      "time)\n",
                      attempt, (long long)(med / US), (long long)(med1 / US));
        best = med < best ? med : best;
        best1 = med1 < best1 ? med1 : best1;
    }
    if (best > limit || best1 > limit1)
        fail_msg("100 us tick: best median lateness %lld us (batch, limit %lld) / %lld us (one at "
                 "a time, limit %lld)",
                 (long long)(best / US), (long long)(limit / US), (long long)(best1 / US),
                 (long long)(limit1 / US));
}

/* ------------------------------------------------------- far future */

static void test_far_future_stays_pending(void **state)
{
    (void)state;
    enum { FAR = 100 };
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 8, HWT_SLEEP_PRECISE);
    for (int i = 0; i < FAR; i++)
        sched(timer, &g_p[i], 10 * 60 * 1000 + i, HWT_MILLISECONDS, INT64_MAX);
    int n = 0;
    for (int64_t d = 1; d <= 40; d += 3)
        sched(timer, &g_p[200 + n++], d, HWT_MILLISECONDS, d * MS);
    for (int64_t d = 8; d <= 64; d += 8) /* multiples of the revolution */
        sched(timer, &g_p[200 + n++], d, HWT_MILLISECONDS, d * MS);
    check_window(200, n, 1 * MS, SLACK_MS);
    assert_false(hwtt_wait_until(runs_of(0, FAR) != 0, 200));
    assert_int_equal(hwt_pending_timeouts(timer), FAR);
    stop_expect(timer, 0, FAR);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------ revolutions */

/* 4 buckets x 100 ms: one revolution is 400 ms, more than the slack, so a
 * timeout fired a revolution early or late fails the window. */
static void test_long_revolution(void **state)
{
    (void)state;
    const int64_t tick = 100 * MS;
    hwt_timer *timer = mk(100, HWT_MILLISECONDS, 4, HWT_SLEEP_PRECISE);
    sched(timer, &g_p[0], 400, HWT_MILLISECONDS, 400 * MS);   /* one revolution */
    sched(timer, &g_p[1], 800, HWT_MILLISECONDS, 800 * MS);   /* two */
    sched(timer, &g_p[2], 1050, HWT_MILLISECONDS, 1050 * MS); /* 2.6 */
    sched(timer, &g_p[3], 1250, HWT_MILLISECONDS, 1250 * MS); /* 3.1 */
    sched(timer, &g_p[4], 150, HWT_MILLISECONDS, 150 * MS);
    check_window(0, 5, tick, 250);
    stop_expect(timer, 0, 0);
    hwtt_destroy(timer);
}

/* A one-bucket wheel: every timeout shares the bucket, only rounds differ. */
static void test_one_bucket_wheel(void **state)
{
    (void)state;
    const int64_t tick = 20 * MS;
    hwt_timer *timer = mk(20, HWT_MILLISECONDS, 1, HWT_SLEEP_PRECISE);
    const int64_t d[] = {5, 20, 35, 55, 130, 250, 0};
    for (int i = 0; i < 7; i++)
        sched(timer, &g_p[i], d[i], HWT_MILLISECONDS, d[i] * MS);
    sched(timer, &g_p[7], 1, HWT_HOURS, INT64_MAX);
    check_window(0, 7, tick, SLACK_MS);
    stop_expect(timer, 7, 1);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------------- main */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, hwtt_teardown_timers)

int main(void)
{
    hwtt_watchdog(150);
    const struct CMUnitTest tests[] = {
        T(test_never_early_1ms_tick),
        T(test_never_early_10ms_tick),
        T(test_never_early_100us_tick),
        T(test_never_early_odd_tick),
        T(test_never_early_random_delays),
        T(test_coarse_tick_window),
        T(test_zero_and_negative_delays_fire_next_tick),
        T(test_units_convert),
        T(test_invalid_unit_rejected),
        T(test_saturation_max_never_fires),
        T(test_saturation_min_fires_promptly),
        T(test_order_increasing_delays),
        T(test_order_increasing_delays_small_wheel),
        T(test_order_increasing_delays_many_revolutions),
        T(test_order_same_delay_is_scheduling_order),
        T(test_order_same_delay_across_ticks),
        T(test_order_same_delay_small_wheel),
        T(test_sub_millisecond_tick),
        T(test_far_future_stays_pending),
        T(test_long_revolution),
        T(test_one_bucket_wheel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
