/*
 * test_fork_bound_timer.c - a fork child must not leak what a parent
 * thread's timeout cache kept alive. A destroyed timer lives on
 * (its memory) while another thread's cache is bound to it (pool.c: the
 * binding's reference); the child frees the other threads' cache sets
 * (hwt__pool_after_fork_in_child) and with them the only pointer to that
 * timer. Run under valgrind (CTest: valgrind_fork_bound_timer): the child's exit
 * status is valgrind's error exit code when it finds a leak.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static hwt_timeout *_Atomic handed;

static void keep(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    atomic_store(&handed, timeout);
}

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static atomic_bool ran, may_exit;

/* Overwrites the stack below the caller: no stale copy of a pointer to the
 * timer stays there for valgrind to find (a real program's threads move
 * on; here the pointer would linger in dead frames). */
static __attribute__((noinline)) void scrub_stack(void)
{
    volatile char pad[256 * 1024];
    for (size_t i = 0; i < sizeof pad; i++)
        pad[i] = 0;
}

/* An executor's thread: runs the handed timeout (its thread binds a cache
 * to the timer), then idles until told to exit. */
static void *run_then_wait(void *p)
{
    (void)p;
    hwt_timeout_run(atomic_load(&handed));
    atomic_store(&handed, NULL);
    scrub_stack();
    atomic_store(&ran, true);
    while (!atomic_load(&may_exit))
        hwtt_sleep_ms(1);
    return NULL;
}

static int child_exits(void *unused)
{
    (void)unused;
    return 0;
}

static pthread_t executor_thread;

/* A 1 ms timer whose expired timeouts go to `keep`. */
static hwt_timer *executor_timer(void)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = keep;
    return hwtt_timer_opts(&o);
}

/* On a thread of its own (joined before the fork), so that the forking
 * thread's stack holds no pointer to the timer. */
static void *set_up_and_destroy(void *p)
{
    (void)p;
    hwt_timer *timer = executor_timer();
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 0, HWT_MILLISECONDS, &h), 0);
    assert_true(hwtt_wait_until(atomic_load(&handed) != NULL, hwtt_slack_ms(5000)));
    assert_int_equal(pthread_create(&executor_thread, NULL, run_then_wait, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran), hwtt_slack_ms(5000)));
    /* The executor's thread is bound to the timer; its cache is empty (the
     * handle still held the timeout when the run let go of it). */
    hwt_timer_destroy(timer);
    hwt_timeout_release(h); /* the last timeout: its region goes back */
    scrub_stack();
    return NULL;
}

static void test_a_child_leaks_no_timer_a_parent_thread_kept(void **state)
{
    (void)state;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, set_up_and_destroy, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    scrub_stack();
    int child = hwtt_run_in_child(child_exits, NULL, hwtt_slack_ms(20000));
    atomic_store(&may_exit, true);
    assert_int_equal(pthread_join(executor_thread, NULL), 0); /* its exit frees the timer */
    assert_int_equal(child, 0);
}

/* The same with the forking thread bound to the destroyed timer: the child
 * must keep its cache set too (the forking thread starts afresh there). */
static hwt_timeout *handle;

static void *destroy_and_release(void *p)
{
    hwt_timer_destroy(p);
    hwt_timeout_release(handle);
    handle = NULL;
    scrub_stack();
    return NULL;
}

static hwt_timer *_Atomic elsewhere;

/* Creates and schedules on a thread of its own: the forking thread then
 * caches nothing of the timer (a cached timeout would keep a region, whose
 * chunk headers point to the timer, mapped). */
static void *create_and_schedule(void *p)
{
    (void)p;
    hwt_timer *timer = executor_timer();
    if (hwt_new_timeout(timer, noop, NULL, 0, HWT_MILLISECONDS, &handle) == 0)
        atomic_store(&elsewhere, timer);
    return NULL;
}

static __attribute__((noinline)) pthread_t bind_here_then_destroy_elsewhere(void)
{
    atomic_store(&handed, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, create_and_schedule, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    hwt_timer *timer = atomic_load(&elsewhere);
    assert_non_null(timer);
    atomic_store(&elsewhere, NULL);
    assert_true(hwtt_wait_until(atomic_load(&handed) != NULL, hwtt_slack_ms(5000)));
    /* The run binds this thread's cache to the timer (empty: the handle
     * still holds the timeout). */
    hwt_timeout_run(atomic_load(&handed));
    atomic_store(&handed, NULL);
    assert_int_equal(pthread_create(&th, NULL, destroy_and_release, timer), 0);
    return th;
}

static void test_a_child_leaks_no_timer_the_forking_thread_kept(void **state)
{
    (void)state;
    pthread_t th = bind_here_then_destroy_elsewhere();
    assert_int_equal(pthread_join(th, NULL), 0);
    scrub_stack();
    int child = hwtt_run_in_child(child_exits, NULL, hwtt_slack_ms(20000));
    assert_int_equal(child, 0);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_child_leaks_no_timer_a_parent_thread_kept),
        cmocka_unit_test(test_a_child_leaks_no_timer_the_forking_thread_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
