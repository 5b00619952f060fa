/*
 * test_sleep_modes.c - the four sleep modes (SPEC.md sections 1 and 3):
 * HWT_SLEEP_PRECISE, HWT_SLEEP_MILLIS, HWT_SLEEP_WINDOWS and HWT_SLEEP_DEFAULT
 * (PRECISE on POSIX) each fire timeouts never early and within generous
 * bounds; a tick below the mode's minimum (1 ms for MILLIS and WINDOWS, 1 us
 * for PRECISE) is raised to it with exactly one HWT_LOG_WARN; an invalid mode
 * is HWT_EINVAL.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#define US INT64_C(1000)
#define MS INT64_C(1000000)

#define SLACK_MS 300

/* ------------------------------------------------------------ probes */

typedef struct probe {
    int64_t sched_ns; /* test thread only */
    int64_t delay_ns; /* test thread only */
    atomic_llong run_ns;
    atomic_int runs;
} probe;

#define NPROBES 64
static probe g_p[NPROBES];

static void probe_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    probe *p = arg;
    atomic_store(&p->run_ns, hwtt_now_ns());
    atomic_fetch_add(&p->runs, 1);
}

static void probes_reset(void)
{
    for (int i = 0; i < NPROBES; i++) {
        g_p[i].sched_ns = g_p[i].delay_ns = 0;
        atomic_store(&g_p[i].run_ns, 0);
        atomic_store(&g_p[i].runs, 0);
    }
}

static int setup(void **state)
{
    (void)state;
    probes_reset();
    return 0;
}

static int runs_of(int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += atomic_load(&g_p[i].runs);
    return sum;
}

static hwt_options opts(int64_t tick, hwt_unit unit, hwt_sleep_mode mode, hwtt_log *log)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = (uint64_t)tick;
    o.tick_unit = unit;
    o.ticks_per_wheel = 64;
    o.sleep_mode = mode;
    if (log != NULL) {
        memset(log, 0, sizeof *log);
        o.log = hwtt_log_cb;
        o.log_ctx = log;
    }
    return o;
}

/* Log sinks live as long as the process: a failed test's timer may still log
 * while the teardown destroys it. */
static hwtt_log g_log;

static const int64_t g_delays_us[] = {0,    500,   1000,  2500,  3000,  7000,
                                      9999, 10000, 12000, 15000, 33000, 101000};
#define NDELAYS ((int)(sizeof g_delays_us / sizeof g_delays_us[0]))

/* A timer with this mode and tick (ns) fires each delay of g_delays_us never
 * early and by delay + tick + slack. */
static void mode_window(hwt_sleep_mode mode, int64_t tick_ns)
{
    probes_reset();
    hwtt_log *log = &g_log;
    hwt_options o = opts(tick_ns, HWT_NANOSECONDS, mode, log);
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(atomic_load(&log->count[HWT_LOG_WARN]), 0);
    for (int i = 0; i < NDELAYS; i++) {
        g_p[i].delay_ns = g_delays_us[i] * US;
        g_p[i].sched_ns = hwtt_now_ns();
        assert_int_equal(
            hwt_new_timeout(timer, probe_run, &g_p[i], g_delays_us[i], HWT_MICROSECONDS, NULL), 0);
    }
    bool all = hwtt_wait_until(runs_of(NDELAYS) == NDELAYS,
                               101 + tick_ns / MS + 2 * hwtt_slack_ms(SLACK_MS) + 1000);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);
    if (!all)
        fail_msg("mode %d tick %lld ns: only %d of %d timeouts ran", (int)mode, (long long)tick_ns,
                 runs_of(NDELAYS), NDELAYS);
    assert_int_equal(n, 0);
    for (int i = 0; i < NDELAYS; i++) {
        int64_t took = atomic_load(&g_p[i].run_ns) - g_p[i].sched_ns;
        assert_int_equal(atomic_load(&g_p[i].runs), 1);
        if (took < g_p[i].delay_ns)
            fail_msg("mode %d tick %lld ns: delay %lld ns ran after only %lld ns", (int)mode,
                     (long long)tick_ns, (long long)g_p[i].delay_ns, (long long)took);
        if (took > g_p[i].delay_ns + tick_ns + hwtt_slack_ms(SLACK_MS) * MS)
            fail_msg("mode %d tick %lld ns: delay %lld ns ran after %lld ns", (int)mode,
                     (long long)tick_ns, (long long)g_p[i].delay_ns, (long long)took);
    }
}

/* ------------------------------------------------------------ windows */

static void test_precise_fires_in_window(void **state)
{
    (void)state;
    mode_window(HWT_SLEEP_PRECISE, 1 * MS);
    mode_window(HWT_SLEEP_PRECISE, 10 * MS);
    mode_window(HWT_SLEEP_PRECISE, 250 * US);
    mode_window(HWT_SLEEP_PRECISE, 3 * MS + 333 * US);
}

static void test_millis_fires_in_window(void **state)
{
    (void)state;
    mode_window(HWT_SLEEP_MILLIS, 1 * MS);
    mode_window(HWT_SLEEP_MILLIS, 7 * MS);
    mode_window(HWT_SLEEP_MILLIS, 10 * MS);
    mode_window(HWT_SLEEP_MILLIS, 1500 * US);
}

static void test_windows_fires_in_window(void **state)
{
    (void)state;
    mode_window(HWT_SLEEP_WINDOWS, 1 * MS);  /* sleeps 1 ms (0 -> 1) */
    mode_window(HWT_SLEEP_WINDOWS, 5 * MS);  /* 5 ms rounds down to 0 -> 1 ms steps */
    mode_window(HWT_SLEEP_WINDOWS, 15 * MS); /* 10 ms, then 1 ms steps */
    mode_window(HWT_SLEEP_WINDOWS, 2500 * US);
}

/* Netty's Windows rounding with a 10 ms tick: whole 10 ms sleeps. */
static void test_windows_10ms_tick_fires(void **state)
{
    (void)state;
    mode_window(HWT_SLEEP_WINDOWS, 10 * MS);
}

static void test_default_fires_in_window(void **state)
{
    (void)state;
    mode_window(HWT_SLEEP_DEFAULT, 1 * MS);
    mode_window(HWT_SLEEP_DEFAULT, 10 * MS);
    mode_window(HWT_SLEEP_DEFAULT, 200 * US);
}

/* -------------------------------------------------------- minimum tick */

/* Starts the timer and checks, from the ticks counter, that its tick is not
 * shorter than min_tick_ns: once `n` ticks have been counted, (ticks - 1) *
 * tick cannot exceed the time since start; and not much longer: n ticks are
 * counted within n * tick + generous slack. */
static void check_effective_tick(hwt_timer *timer, int64_t min_tick_ns, uint64_t n)
{
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_stats s;
    bool reached = hwtt_wait_until((hwt_timer_stats(timer, &s), s.ticks >= n),
                                   (int64_t)n * min_tick_ns / MS + hwtt_slack_ms(2000));
    int64_t t1 = hwtt_now_ns();
    assert_true(reached);
    if (t1 - t0 > (int64_t)n * min_tick_ns + hwtt_slack_ms(700) * MS)
        fail_msg("%llu ticks took %lld ns: the tick is much longer than %lld ns",
                 (unsigned long long)n, (long long)(t1 - t0), (long long)min_tick_ns);
    if ((int64_t)(s.ticks - 1) * min_tick_ns > t1 - t0)
        fail_msg("%llu ticks counted within %lld ns: the tick is shorter than %lld ns",
                 (unsigned long long)s.ticks, (long long)(t1 - t0), (long long)min_tick_ns);
}

/* Creates a timer with a tick below (or at) the mode's minimum and checks the
 * warnings logged at creation. Returns the timer (tracked). */
static hwt_timer *create_logged(int64_t tick, hwt_unit unit, hwt_sleep_mode mode, hwtt_log *log,
                                int expect_warn)
{
    hwt_options o = opts(tick, unit, mode, log);
    hwt_timer *timer = NULL;
    int rc = hwt_timer_create(&timer, &o);
    if (rc != 0)
        fail_msg("mode %d tick %lld (unit %d): hwt_timer_create %d (%s)", (int)mode,
                 (long long)tick, (int)unit, rc, hwt_strerror(rc));
    hwtt_track(timer);
    if (atomic_load(&log->count[HWT_LOG_WARN]) != expect_warn)
        fail_msg("mode %d tick %lld (unit %d): %d warnings, expected %d (last: %s)", (int)mode,
                 (long long)tick, (int)unit, atomic_load(&log->count[HWT_LOG_WARN]), expect_warn,
                 log->last);
    assert_int_equal(atomic_load(&log->count[HWT_LOG_ERROR]), 0);
    if (expect_warn)
        assert_true(strlen(log->last) > 0);
    return timer;
}

/* The raised timer works: a few timeouts fire never early, and no further
 * warning is logged while it runs. */
static void check_raised_timer_runs(hwt_timer *timer, hwtt_log *log, int expect_warn)
{
    probes_reset();
    const int64_t d_us[] = {0, 700, 1300, 2600};
    for (int i = 0; i < 4; i++) {
        g_p[i].delay_ns = d_us[i] * US;
        g_p[i].sched_ns = hwtt_now_ns();
        assert_int_equal(
            hwt_new_timeout(timer, probe_run, &g_p[i], d_us[i], HWT_MICROSECONDS, NULL), 0);
    }
    assert_true(hwtt_wait_until(runs_of(4) == 4, 1000 + hwtt_slack_ms(1000)));
    for (int i = 0; i < 4; i++)
        assert_true(atomic_load(&g_p[i].run_ns) - g_p[i].sched_ns >= g_p[i].delay_ns);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 0);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&log->count[HWT_LOG_WARN]), expect_warn);
    assert_int_equal(atomic_load(&log->count[HWT_LOG_ERROR]), 0);
}

static void min_tick_case(int64_t tick, hwt_unit unit, hwt_sleep_mode mode, int64_t min_ns,
                          int expect_warn)
{
    hwt_timer *timer = create_logged(tick, unit, mode, &g_log, expect_warn);
    check_effective_tick(timer, min_ns, 200);
    check_raised_timer_runs(timer, &g_log, expect_warn);
}

static void test_millis_tick_below_1ms_raised(void **state)
{
    (void)state;
    min_tick_case(100, HWT_MICROSECONDS, HWT_SLEEP_MILLIS, 1 * MS, 1);
    min_tick_case(999999, HWT_NANOSECONDS, HWT_SLEEP_MILLIS, 1 * MS, 1);
}

static void test_windows_tick_below_1ms_raised(void **state)
{
    (void)state;
    min_tick_case(100, HWT_MICROSECONDS, HWT_SLEEP_WINDOWS, 1 * MS, 1);
    min_tick_case(1, HWT_NANOSECONDS, HWT_SLEEP_WINDOWS, 1 * MS, 1);
}

static void test_precise_tick_below_1us_raised(void **state)
{
    (void)state;
    min_tick_case(100, HWT_NANOSECONDS, HWT_SLEEP_PRECISE, 1 * US, 1);
    min_tick_case(999, HWT_NANOSECONDS, HWT_SLEEP_PRECISE, 1 * US, 1);
}

/* DEFAULT is PRECISE on POSIX: 100 ns is raised to 1 us with a warning, while
 * 100 us (below WINDOWS' 1 ms minimum) is accepted silently. */
static void test_default_minimum_is_precise_on_posix(void **state)
{
    (void)state;
    min_tick_case(100, HWT_NANOSECONDS, HWT_SLEEP_DEFAULT, 1 * US, 1);
    min_tick_case(100, HWT_MICROSECONDS, HWT_SLEEP_DEFAULT, 100 * US, 0);
}

/* At the minimum, nothing is logged. */
static void test_tick_at_minimum_no_warning(void **state)
{
    (void)state;
    min_tick_case(1, HWT_MILLISECONDS, HWT_SLEEP_MILLIS, 1 * MS, 0);
    min_tick_case(1000000, HWT_NANOSECONDS, HWT_SLEEP_WINDOWS, 1 * MS, 0);
    min_tick_case(1, HWT_MICROSECONDS, HWT_SLEEP_PRECISE, 1 * US, 0);
    min_tick_case(1000, HWT_NANOSECONDS, HWT_SLEEP_DEFAULT, 1 * US, 0);
}

/* -------------------------------------------------------- invalid mode */

static void test_invalid_mode_rejected(void **state)
{
    (void)state;
    const int bad[] = {42, 4, -1, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hwt_options o = opts(10, HWT_MILLISECONDS, (hwt_sleep_mode)bad[i], &g_log);
        hwt_timer *timer = NULL;
        int rc = hwt_timer_create(&timer, &o);
        if (rc == 0) {
            hwt_timer_destroy(timer);
            fail_msg("sleep mode %d accepted", bad[i]);
        }
        assert_int_equal(rc, HWT_EINVAL);
        /* Also when the tick would have been raised. */
        o.tick_duration = 1;
        o.tick_unit = HWT_NANOSECONDS;
        timer = NULL;
        rc = hwt_timer_create(&timer, &o);
        if (rc == 0) {
            hwt_timer_destroy(timer);
            fail_msg("sleep mode %d accepted", bad[i]);
        }
        assert_int_equal(rc, HWT_EINVAL);
    }
}

/* ------------------------------------------------- the worker's CPU turns */

#define SHORT_TURN_NS 100000LL

/* The length of thread `tid`'s turns on a CPU (its se.slice, which /proc
 * shows where the kernel has scheduler debugging), or -1. */
static long long turn_of(pid_t tid)
{
    char line[128];
    if (hwtt_read_task_file(tid, "sched", "se.slice", line, sizeof line) != 0)
        return -1;
    const char *colon = strchr(line, ':');
    return colon != NULL ? atoll(colon + 1) : -1;
}

/* Whether a SCHED_OTHER thread may choose its turn: Linux 6.12. */
static bool kernel_has_custom_turns(void)
{
    struct utsname u;
    int major = 0, minor = 0;
    assert_int_equal(uname(&u), 0);
    if (sscanf(u.release, "%d.%d", &major, &minor) != 2)
        return false;
    return major > 6 || (major == 6 && minor >= 12);
}

/* Creates a 1 ms timer of `mode` whose worker is named `name` into *timer
 * and starts it: hwt_timer_create's error, else hwt_timer_start's result.
 * No asserts: any thread. */
static int create_and_start(hwt_timer **timer, hwt_sleep_mode mode, const char *name,
                            const pthread_attr_t *thread_attr)
{
    hwt_options o = opts(1, HWT_MILLISECONDS, mode, NULL);
    o.thread_name = name;
    o.thread_attr = thread_attr;
    *timer = NULL;
    int rc = hwt_timer_create(timer, &o);
    return rc != 0 ? rc : hwt_timer_start(*timer);
}

/* The id of the one thread named `name`, looked for until it is found: a
 * listing of /proc/self/task made while a thread exits can stop at that
 * thread and miss those listed after it, such as the worker of the nice-3
 * thread below, just joined. */
static pid_t the_thread_named(const char *name)
{
    pid_t tid = -1;
    assert_true(hwtt_wait_until((tid = hwtt_thread_named(name)) > 0, hwtt_slack_ms(5000)));
    return tid;
}

/* Starts a timer of `mode` whose worker is named `name`: the worker's id. */
static pid_t start_worker(hwt_sleep_mode mode, const char *name)
{
    hwt_timer *timer;
    int rc = create_and_start(&timer, mode, name, NULL);
    if (timer != NULL)
        hwtt_track(timer);
    assert_int_equal(rc, 0);
    return the_thread_named(name);
}

static int nice_of(pid_t tid)
{
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)tid);
    assert_int_equal(errno, 0);
    return nice;
}

/* A thread at nice 3 that starts a PRECISE timer (its worker inherits the
 * nice value); what it got, for the test thread to check. */
struct start_at_nice_3 {
    int nice_rc;
    int rc;
    hwt_timer *timer;
};

static void *start_at_nice_3(void *arg)
{
    struct start_at_nice_3 *c = arg;
    c->nice_rc = setpriority(PRIO_PROCESS, (id_t)gettid(), 3);
    c->rc = create_and_start(&c->timer, HWT_SLEEP_PRECISE, "hwt-turns-nice", NULL);
    return NULL;
}

/* A PRECISE worker asks for the shortest turns on a CPU, so that a wake-up
 * takes a CPU from a busy thread at once (os.h); it keeps the nice value it
 * inherited and leaves a policy its thread_attr chose. Other modes sleep in
 * whole milliseconds and keep the default turn. */
static void test_precise_worker_takes_short_turns(void **state)
{
    (void)state;
    long long default_turn = turn_of(gettid());
    if (!kernel_has_custom_turns() || default_turn < 0)
        skip(); /* the request is ignored, or the turn cannot be read */
    assert_true(default_turn != SHORT_TURN_NS);

    pid_t precise = start_worker(HWT_SLEEP_PRECISE, "hwt-turns-prec");
    assert_int_equal(sched_getscheduler(precise), SCHED_OTHER);
    assert_true(turn_of(precise) == SHORT_TURN_NS);
    assert_int_equal(nice_of(precise), nice_of(gettid()));

    pid_t millis = start_worker(HWT_SLEEP_MILLIS, "hwt-turns-ms");
    assert_true(turn_of(millis) == default_turn);

    struct start_at_nice_3 at_3 = {0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, start_at_nice_3, &at_3), 0);
    pthread_join(t, NULL);
    if (at_3.timer != NULL)
        hwtt_track(at_3.timer);
    assert_int_equal(at_3.nice_rc, 0);
    assert_int_equal(at_3.rc, 0);
    pid_t niced = the_thread_named("hwt-turns-nice");
    assert_int_equal(nice_of(niced), 3);
    assert_true(turn_of(niced) == SHORT_TURN_NS);

    /* glibc's thread attributes offer SCHED_FIFO and SCHED_RR besides
     * SCHED_OTHER, both for privileged threads only: where creating one is
     * refused, there is nothing more to check. */
    pthread_attr_t fifo;
    struct sched_param lowest = {.sched_priority = sched_get_priority_min(SCHED_FIFO)};
    assert_int_equal(pthread_attr_init(&fifo), 0);
    assert_int_equal(pthread_attr_setinheritsched(&fifo, PTHREAD_EXPLICIT_SCHED), 0);
    assert_int_equal(pthread_attr_setschedpolicy(&fifo, SCHED_FIFO), 0);
    assert_int_equal(pthread_attr_setschedparam(&fifo, &lowest), 0);
    hwt_timer *timer;
    int rc = create_and_start(&timer, HWT_SLEEP_PRECISE, "hwt-turns-fifo", &fifo);
    assert_non_null(timer); /* created; its start may be refused */
    hwtt_track(timer);
    if (rc == 0) {
        pid_t tid = the_thread_named("hwt-turns-fifo");
        struct sched_param param;
        assert_int_equal(sched_getscheduler(tid), SCHED_FIFO);
        assert_int_equal(sched_getparam(tid, &param), 0);
        assert_int_equal(param.sched_priority, lowest.sched_priority);
    }
    hwtt_destroy(timer);
    pthread_attr_destroy(&fifo);
}

/* ------------------------------------------------------------------- main */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, hwtt_teardown_timers)

int main(void)
{
    hwtt_watchdog(150);
    const struct CMUnitTest tests[] = {
        T(test_precise_fires_in_window),
        T(test_precise_worker_takes_short_turns),
        T(test_millis_fires_in_window),
        T(test_windows_fires_in_window),
        T(test_windows_10ms_tick_fires),
        T(test_default_fires_in_window),
        T(test_millis_tick_below_1ms_raised),
        T(test_windows_tick_below_1ms_raised),
        T(test_precise_tick_below_1us_raised),
        T(test_default_minimum_is_precise_on_posix),
        T(test_tick_at_minimum_no_warning),
        T(test_invalid_mode_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
