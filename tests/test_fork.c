/*
 * test_fork.c - fork() around a timer. In the child an inherited timer is
 * stopped: schedules get HWT_ESTOPPED, stop returns 0 with an empty list,
 * destroy returns at once, the pending count reads 0, its timeouts are not
 * run, handed back or cancelled there, and its handles may be released.
 * Timers created in the child work; the parent's are unaffected. The
 * child's count of live timers drops with the inherited ones it destroys.
 *
 * The child's checks report through its exit status (cmocka's asserts
 * belong to the test's own process): 0, or the number of the failed check.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

/* TSan cannot follow threads started in the child of a multi-threaded
 * fork (it reuses the parent's thread ids): there, the children do not
 * create timers of their own; everything else is checked. */
#if defined(__SANITIZE_THREAD__)
#define CHILD_MAY_START_THREADS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHILD_MAY_START_THREADS 0
#endif
#endif
#ifndef CHILD_MAY_START_THREADS
#define CHILD_MAY_START_THREADS 1
#endif

#define CHECK(n, cond)                                                                             \
    do {                                                                                           \
        if (!(cond))                                                                               \
            _exit(n);                                                                              \
    } while (0)

/* Runs child(arg) in a forked child: its exit status (0, or the number of
 * the failed check). */
static int in_child(int (*child)(void *), void *arg)
{
    return hwtt_run_in_child(child, arg, hwtt_slack_ms(20000));
}

struct inherited {
    hwt_timer *timer;
    hwt_timeout *pending_handle; /* a 1-hour timeout with a cancelled callback */
    hwt_timeout *soon_handle;    /* due 100 ms after the fork */
    hwtt_rec *pending_rec, *soon_rec;
};

static int child_of_a_running_timer(void *p)
{
    struct inherited *in = p;
    atomic_int count = 0;
    CHECK(1, hwt_new_timeout(in->timer, hwtt_count_task, &count, 1, HWT_MILLISECONDS, NULL) ==
                 HWT_ESTOPPED);
    CHECK(2, hwt_timer_start(in->timer) == HWT_ESTOPPED);
    CHECK(3, hwt_pending_timeouts(in->timer) == 0);
    hwt_stats st;
    hwt_timer_stats(in->timer, &st);
    CHECK(4, st.pending == 0);
    /* Neither run nor cancelled here: the parent's worker owns them. */
    CHECK(5, !hwt_timeout_cancel(in->pending_handle));
    CHECK(6, !hwt_timeout_is_cancelled(in->pending_handle));
    hwt_timeout_run(in->pending_handle); /* not an executor's: nothing */
    int64_t until = hwtt_now_ns() + 300 * INT64_C(1000000);
    while (hwtt_now_ns() < until)
        hwtt_sleep_ms(10);
    CHECK(7, atomic_load(&in->soon_rec->ran) == 0); /* due, but no worker here */
    hwt_stats later;
    hwt_timer_stats(in->timer, &later);
    CHECK(20, later.ticks == st.ticks); /* no worker here: no tick elapses for it */
    CHECK(8, atomic_load(&in->pending_rec->cb) == 0);
    hwt_timeout **list = (hwt_timeout **)&count;
    size_t n = 5;
    CHECK(9, hwt_stop(in->timer, &list, &n) == 0);
    CHECK(10, list == NULL && n == 0);
    CHECK(11, hwt_stop(in->timer, NULL, NULL) == 0);
    CHECK(12, atomic_load(&in->pending_rec->cb) == 0);
    hwt_timeout_release(in->pending_handle); /* allowed */
    hwt_timeout_release(in->soon_handle);
    hwt_timer_destroy(in->timer); /* returns at once */
    if (!CHILD_MAY_START_THREADS)
        return 0;

    /* A timer created in the child works. */
    hwt_timer *mine = NULL;
    CHECK(13, hwt_timer_create(&mine, NULL) == 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    hwt_timer_destroy(mine);
    CHECK(14, hwt_timer_create(&mine, &o) == 0);
    CHECK(15, hwt_new_timeout(mine, hwtt_count_task, &count, 1, HWT_MILLISECONDS, NULL) == 0);
    until = hwtt_now_ns() + 5000 * INT64_C(1000000);
    while (atomic_load(&count) == 0 && hwtt_now_ns() < until)
        hwtt_sleep_ms(1);
    CHECK(16, atomic_load(&count) == 1);
    hwt_timeout *h = NULL;
    CHECK(17, hwt_new_timeout_task(mine, &hwtt_rec_task, in->pending_rec, 1, HWT_HOURS, &h) == 0);
    CHECK(18, hwt_timeout_cancel(h));
    hwt_timeout_release(h);
    hwt_timer_destroy(mine);
    CHECK(19, atomic_load(&in->pending_rec->cb) == 1);
    return 0;
}

static void test_child_sees_an_inherited_timer_stopped(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    static hwtt_rec pending_rec, soon_rec;
    pending_rec = (hwtt_rec){0};
    soon_rec = (hwtt_rec){0};
    struct inherited in = {.timer = timer, .pending_rec = &pending_rec, .soon_rec = &soon_rec};
    assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &pending_rec, 1, HWT_HOURS,
                                          &in.pending_handle),
                     0);
    assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &soon_rec, 100,
                                          HWT_MILLISECONDS, &in.soon_handle),
                     0);
    assert_int_equal(in_child(child_of_a_running_timer, &in), 0);

    /* The parent's timer is unaffected: the due one runs, once. */
    assert_true(hwtt_wait_until(atomic_load(&soon_rec.ran) == 1, hwtt_slack_ms(5000)));
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_true(hwt_timeout_cancel(in.pending_handle));
    assert_true(hwtt_wait_until(atomic_load(&pending_rec.cb) == 1, hwtt_slack_ms(5000)));
    assert_int_equal(atomic_load(&pending_rec.ran), 0);
    hwt_timeout_release(in.pending_handle);
    hwt_timeout_release(in.soon_handle);
    atomic_int count = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &count, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&count) == 1, hwtt_slack_ms(5000)));
    hwtt_destroy(timer);
}

/* A fork inside a fork child: a timer inherited through both lost its
 * worker at the first fork, and its ticks stand where they stood then, in
 * the grandchild too. */
static uint64_t ticks_of(hwt_timer *timer)
{
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    return st.ticks;
}

struct ticks_in_child {
    hwt_timer *timer;
    uint64_t in_child;
};

static int grandchild_reads_ticks(void *p)
{
    struct ticks_in_child *c = p;
    CHECK(1, ticks_of(c->timer) == c->in_child);
    return 0;
}

static int child_forks_again(void *p)
{
    struct ticks_in_child *c = p;
    c->in_child = ticks_of(c->timer);
    hwtt_sleep_ms(20); /* 20 ticks pass here, with no worker for the timer */
    CHECK(2, ticks_of(c->timer) == c->in_child);
    int rc = in_child(grandchild_reads_ticks, c);
    CHECK(3, rc != HWTT_CHILD_HUNG);
    return rc;
}

static void test_ticks_stand_still_in_a_grandchild(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    assert_true(hwtt_wait_until(ticks_of(timer) >= 5, hwtt_slack_ms(2000)));
    struct ticks_in_child c = {timer, 0};
    assert_int_equal(in_child(child_forks_again, &c), 0);
}

/* A timer created but never started, inherited: stopped in the child too. */
static int child_of_an_idle_timer(void *p)
{
    hwt_timer *timer = p;
    CHECK(1, hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_MILLISECONDS, NULL) ==
                 HWT_ESTOPPED);
    CHECK(2, hwt_timer_start(timer) == HWT_ESTOPPED);
    hwt_timer_destroy(timer);
    return 0;
}

static void test_child_of_an_unstarted_timer(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    assert_int_equal(in_child(child_of_an_idle_timer, timer), 0);
    atomic_int count = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &count, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&count) == 1, hwtt_slack_ms(5000)));
    hwtt_destroy(timer);
}

/* fork() from a task, on the worker thread itself: in the child that thread
 * is nobody's worker, and stop/destroy of the inherited timer return at once
 * (not HWT_EDEADLK, not a join of a thread that is not there). */
static atomic_int fork_child_status = -1;

static void child_of_the_worker(void *p)
{
    hwt_timer *timer = p;
    CHECK(1, hwt_stop(timer, NULL, NULL) == 0);
    CHECK(2, hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_MILLISECONDS, NULL) ==
                 HWT_ESTOPPED);
    hwt_timer_destroy(timer);
}

static void forking_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    hwt_timer *timer = hwt_timeout_timer(timeout);
    pid_t pid = fork();
    if (pid == 0) {
        hwtt_watchdog(20);
        child_of_the_worker(timer);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    atomic_store(&fork_child_status, WIFEXITED(status) ? WEXITSTATUS(status) : 200);
}

static void test_fork_from_a_task(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    atomic_store(&fork_child_status, -1);
    assert_int_equal(hwt_new_timeout(timer, forking_task, NULL, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&fork_child_status) != -1, hwtt_slack_ms(10000)));
    assert_int_equal(atomic_load(&fork_child_status), 0);
    hwtt_destroy(timer);
}

/* fork() from a task, whose child returns from the task instead of calling
 * exec or _exit: that thread is the child's only one, and back in the
 * worker's loop it would run the parent's timeouts, in the child, and then
 * sleep there for good. The child ends (status 0) as the task returns; the
 * timeouts due after it run once, in the parent only (runs in the child are
 * counted in shared memory). */
static pid_t parent_pid;
static atomic_int *runs_in_child; /* MAP_SHARED: the child's writes show here */
static atomic_int forked_child = 0;

static void count_where_it_runs(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    if (getpid() != parent_pid)
        atomic_fetch_add(runs_in_child, 1);
    else
        atomic_fetch_add((atomic_int *)arg, 1);
}

static void fork_and_return(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    pid_t pid = fork();
    if (pid != 0)
        atomic_store(&forked_child, pid);
}

static void test_a_child_forked_in_a_task_ends_as_the_task_returns(void **state)
{
    (void)state;
    parent_pid = getpid();
    runs_in_child = mmap(NULL, sizeof *runs_in_child, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(runs_in_child != MAP_FAILED);
    atomic_store(runs_in_child, 0);
    atomic_store(&forked_child, 0);
    atomic_int runs_in_parent = 0;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_new_timeout(timer, fork_and_return, NULL, 1, HWT_MILLISECONDS, NULL), 0);
    for (int ms = 1; ms <= 50; ms += 7)
        assert_int_equal(
            hwt_new_timeout(timer, count_where_it_runs, &runs_in_parent, ms, HWT_MILLISECONDS, NULL),
            0);
    assert_true(hwtt_wait_until(atomic_load(&forked_child) != 0, hwtt_slack_ms(5000)));
    pid_t pid = atomic_load(&forked_child);
    int status = 0;
    if (!hwtt_wait_until(waitpid(pid, &status, WNOHANG) == pid, hwtt_slack_ms(10000))) {
        kill(pid, SIGKILL); /* it blocks every signal, as the worker it was */
        waitpid(pid, &status, 0);
        fail_msg("the child went on as the worker (%d runs there)", atomic_load(runs_in_child));
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(hwtt_wait_until(atomic_load(&runs_in_parent) == 8, hwtt_slack_ms(5000)));
    assert_int_equal(atomic_load(runs_in_child), 0);
    hwtt_destroy(timer);
    munmap((void *)runs_in_child, sizeof *runs_in_child);
}

/* The forking thread's cache of timeouts for an inherited timer is dropped
 * in the child: schedules on a child's timer start from a clean cache, and
 * releasing the inherited handles that the cache would have taken back
 * touches nothing of the parent's timer. */
static int child_after_busy_thread(void *p)
{
    hwt_timeout **handles = p;
    for (int i = 0; i < 200; i++)
        hwt_timeout_release(handles[i]);
    if (!CHILD_MAY_START_THREADS)
        return 0;
    hwt_timer *mine = NULL;
    CHECK(1, hwt_timer_create(&mine, NULL) == 0);
    for (int i = 0; i < 1000; i++)
        CHECK(2, hwt_new_timeout(mine, hwtt_count_task, NULL, 1, HWT_HOURS, NULL) == 0);
    CHECK(3, hwt_pending_timeouts(mine) == 1000);
    hwt_timer_destroy(mine);
    return 0;
}

static void test_forking_thread_cache_is_dropped(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    static hwt_timeout *handles[200];
    for (int i = 0; i < 200; i++)
        assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, &handles[i]),
                         0);
    for (int i = 0; i < 100; i++)
        assert_true(hwt_timeout_cancel(handles[i]));
    assert_int_equal(in_child(child_after_busy_thread, handles), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 100);
    for (int i = 0; i < 200; i++)
        hwt_timeout_release(handles[i]);
    hwtt_destroy(timer);
}

/* Options whose log callback counts into `log`. */
static hwt_options logging_to(hwtt_log *log)
{
    hwt_options o;
    hwt_options_init(&o);
    o.log = hwtt_log_cb;
    o.log_ctx = log;
    return o;
}

/* The warning past 64 live timers counts the inherited ones the child has
 * not destroyed (they are in its memory), and not those it has. */
enum { PARENTS_TIMERS = 60, LIVE_TIMERS_WARNED_PAST = 64 };

static int child_destroys_then_creates(void *arg)
{
    hwt_timer **inherited = arg;
    for (int i = 0; i < PARENTS_TIMERS; i++)
        hwt_timer_destroy(inherited[i]); /* returns at once */
    static hwtt_log log;
    hwt_options o = logging_to(&log);
    static hwt_timer *mine[LIVE_TIMERS_WARNED_PAST + 1];
    for (int i = 0; i < LIVE_TIMERS_WARNED_PAST; i++)
        CHECK(1, hwt_timer_create(&mine[i], &o) == 0);
    CHECK(2, atomic_load(&log.count[HWT_LOG_ERROR]) == 0); /* 64 live: no warning */
    CHECK(3, hwt_timer_create(&mine[LIVE_TIMERS_WARNED_PAST], &o) == 0);
    CHECK(4, atomic_load(&log.count[HWT_LOG_ERROR]) == 1); /* the 65th: one */
    for (int i = 0; i <= LIVE_TIMERS_WARNED_PAST; i++)
        hwt_timer_destroy(mine[i]);
    return 0;
}

/* The warning is once per process: a child whose parent warned warns too,
 * once, as its own live timers go past 64. */
static int child_creates_one_more(void *arg)
{
    (void)arg;
    static hwtt_log log;
    hwt_options o = logging_to(&log);
    hwt_timer *mine[2];
    CHECK(1, hwt_timer_create(&mine[0], &o) == 0);
    CHECK(2, atomic_load(&log.count[HWT_LOG_ERROR]) == 1);
    CHECK(3, hwt_timer_create(&mine[1], &o) == 0);
    CHECK(4, atomic_load(&log.count[HWT_LOG_ERROR]) == 1);
    hwt_timer_destroy(mine[0]);
    hwt_timer_destroy(mine[1]);
    return 0;
}

static void test_a_child_warns_once_of_its_own(void **state)
{
    (void)state;
    static hwtt_log log;
    hwt_options o = logging_to(&log);
    static hwt_timer *timers[LIVE_TIMERS_WARNED_PAST + 1];
    for (int i = 0; i <= LIVE_TIMERS_WARNED_PAST; i++)
        assert_int_equal(hwt_timer_create(&timers[i], &o), 0);
    /* The parent may have warned in an earlier test: at most once here. */
    assert_true(atomic_load(&log.count[HWT_LOG_ERROR]) <= 1);
    assert_int_equal(in_child(child_creates_one_more, NULL), 0);
    for (int i = 0; i <= LIVE_TIMERS_WARNED_PAST; i++)
        hwt_timer_destroy(timers[i]);
}

static void test_a_child_does_not_count_the_inherited_timers_it_destroyed(void **state)
{
    (void)state;
    static hwt_timer *timers[PARENTS_TIMERS];
    for (int i = 0; i < PARENTS_TIMERS; i++)
        timers[i] = hwtt_timer(100, HWT_MILLISECONDS, 8);
    assert_int_equal(in_child(child_destroys_then_creates, timers), 0);
    for (int i = 0; i < PARENTS_TIMERS; i++)
        hwt_timer_destroy(timers[i]);
}

/* A create whose own log callback (the warning past 64) forks: the create
 * goes on in the child, with a timer of the child's, which the child's
 * count of live timers (its list's, after_fork_in_child) must take in as it
 * lists it. Run in a child of its own, which has not warned yet. */
static pid_t forked_in_the_warning = -1;

static void fork_in_the_warning(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)message;
    if (level == HWT_LOG_ERROR)
        forked_in_the_warning = fork();
}

static int create_the_65th_forking(void *arg)
{
    (void)arg;
    static hwtt_log quiet;
    hwt_options o = logging_to(&quiet);
    static hwt_timer *timers[LIVE_TIMERS_WARNED_PAST];
    for (int i = 0; i < LIVE_TIMERS_WARNED_PAST; i++)
        CHECK(1, hwt_timer_create(&timers[i], &o) == 0);
    hwt_options forking;
    hwt_options_init(&forking);
    forking.log = fork_in_the_warning;
    hwt_timer *last;
    CHECK(2, hwt_timer_create(&last, &forking) == 0);
    CHECK(3, forked_in_the_warning >= 0);
    if (forked_in_the_warning == 0) { /* the grandchild: `last` is its own */
        for (int i = 0; i < LIVE_TIMERS_WARNED_PAST; i++)
            hwt_timer_destroy(timers[i]);
        static hwtt_log log;
        hwt_options counted = logging_to(&log);
        static hwt_timer *mine[LIVE_TIMERS_WARNED_PAST];
        for (int i = 0; i < LIVE_TIMERS_WARNED_PAST - 1; i++)
            CHECK(4, hwt_timer_create(&mine[i], &counted) == 0);
        CHECK(5, atomic_load(&log.count[HWT_LOG_ERROR]) == 0); /* 64 live with `last` */
        CHECK(6, hwt_timer_create(&mine[LIVE_TIMERS_WARNED_PAST - 1], &counted) == 0);
        CHECK(7, atomic_load(&log.count[HWT_LOG_ERROR]) == 1); /* the 65th */
        _exit(0);
    }
    int status;
    CHECK(8, waitpid(forked_in_the_warning, &status, 0) == forked_in_the_warning);
    hwt_timer_destroy(last);
    for (int i = 0; i < LIVE_TIMERS_WARNED_PAST; i++)
        hwt_timer_destroy(timers[i]);
    return WIFEXITED(status) ? (WEXITSTATUS(status) == 0 ? 0 : 10 + WEXITSTATUS(status)) : 9;
}

static void test_a_child_forked_in_the_warning_counts_its_new_timer(void **state)
{
    (void)state;
    assert_int_equal(in_child(create_the_65th_forking, NULL), 0);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_child_forked_in_the_warning_counts_its_new_timer),
        cmocka_unit_test_teardown(test_child_sees_an_inherited_timer_stopped, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_child_warns_once_of_its_own, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_ticks_stand_still_in_a_grandchild, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_child_of_an_unstarted_timer, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_fork_from_a_task, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_child_forked_in_a_task_ends_as_the_task_returns,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_forking_thread_cache_is_dropped, hwtt_teardown_timers),
        cmocka_unit_test(test_a_child_does_not_count_the_inherited_timers_it_destroyed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
