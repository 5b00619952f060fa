/*
 * test_fork_time.c - where a fork child's inherited timer stops counting
 * ticks: at the fork, not when the child gets to run.
 *
 * Header: ticks are "ticks elapsed since the worker started, skipped ones
 * too, until it ended (a stop; for a timer inherited by a fork child, the
 * fork)"; "Counters only grow".
 *
 * Linked with the library's objects: its constructor (timer.c,
 * register_atfork_at_load) has the default priority, so the constructor
 * below (priority 101) registers its fork handler first, as a shared library
 * initialised before libhwtimer does. Its child handler runs before the
 * library's (fork() runs child handlers oldest first), and holds the child
 * there while the parent stops the timer.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

static struct shared {
    atomic_int hold_child;       /* the early child handler waits for parent_done */
    atomic_int child_in_handler; /* the child is in it */
    atomic_int parent_done;
    uint64_t child_ticks;
    uint64_t grandchild_ticks;
} *shared;

static void early_child_handler(void)
{
    if (shared == NULL || !atomic_load(&shared->hold_child))
        return;
    atomic_store(&shared->child_in_handler, 1);
    int64_t deadline = hwtt_now_ns() + INT64_C(10000000000);
    while (!atomic_load(&shared->parent_done) && hwtt_now_ns() < deadline)
        usleep(200);
}

__attribute__((constructor(101))) static void register_early_handler(void)
{
    pthread_atfork(NULL, NULL, early_child_handler);
}

static uint64_t ticks_of(hwt_timer *timer)
{
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    return st.ticks;
}

/* The parent stops the timer after fork() returned, while the child is held
 * before the library's child handler: the child cannot report more ticks
 * than the worker's last count, which the parent reports after its stop and
 * after the child exited (exit, then waitpid: counters only grow). */
static void test_inherited_ticks_stop_at_the_fork_not_when_the_child_runs(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    assert_true(hwtt_wait_until(ticks_of(timer) >= 5, hwtt_slack_ms(2000)));
    atomic_store(&shared->hold_child, 1);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        shared->child_ticks = ticks_of(timer);
        _exit(0);
    }
    assert_true(hwtt_wait_until(atomic_load(&shared->child_in_handler), hwtt_slack_ms(5000)));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    uint64_t at_stop = ticks_of(timer);
    hwtt_sleep_ms(20); /* 20 tick lengths pass before the child's handlers go on */
    atomic_store(&shared->parent_done, 1);
    int status = 0;
    assert_true(hwtt_wait_until(waitpid(pid, &status, WNOHANG) == pid, hwtt_slack_ms(10000)));
    atomic_store(&shared->hold_child, 0);
    uint64_t after_child = ticks_of(timer);
    print_message("  parent: %llu ticks after the stop; child: %llu; parent after the child "
                  "exited: %llu\n",
                  (unsigned long long)at_stop, (unsigned long long)shared->child_ticks,
                  (unsigned long long)after_child);
    hwtt_destroy(timer);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_true(shared->child_ticks <= at_stop);
    assert_true(after_child >= shared->child_ticks);
}

/* Forks nested deep: a timer created 4094 forks deep loses its worker at
 * the fork that begins generation 4095, and a grandchild (generation 4096)
 * must report its ticks as they stood then, as test_fork's
 * test_ticks_stand_still_in_a_grandchild checks two levels down (a table of
 * fork times by generation, 4096 slots, once made the grandchild count the
 * 20 ticks its parent lived). The generation is set directly (a child of
 * the test stands for a process 4094 forks deep) instead of forking 4094
 * times. */
static hwt_timer *deep_timer; /* created 4094 forks deep */

static int grandchild_of_a_deep_timer(void *p)
{
    uint64_t in_child = *(uint64_t *)p;
    shared->grandchild_ticks = ticks_of(deep_timer);
    return shared->grandchild_ticks == in_child ? 0 : 1;
}

static int child_of_a_deep_timer(void *p)
{
    (void)p;
    uint64_t in_child = ticks_of(deep_timer);
    shared->child_ticks = in_child;
    hwtt_sleep_ms(20); /* 20 ticks pass here, with no worker for the timer */
    if (ticks_of(deep_timer) != in_child)
        return 2;
    int rc = hwtt_run_in_child(grandchild_of_a_deep_timer, &in_child, 10000);
    return rc == 0 ? 0 : 10 + rc;
}

static int process_4094_forks_deep(void *p)
{
    (void)p;
    atomic_store(&hwt__fork_generation, 4094u); /* as if forked 4094 times */
    deep_timer = hwtt_timer(1, HWT_MILLISECONDS, 64);
    if (hwt_timer_start(deep_timer) != 0)
        return 3;
    if (!hwtt_wait_until(ticks_of(deep_timer) >= 5, 2000))
        return 4;
    int rc = hwtt_run_in_child(child_of_a_deep_timer, NULL, 20000);
    hwt_timer_destroy(deep_timer);
    return rc;
}

static void test_ticks_stand_still_in_a_grandchild_4094_forks_deep(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    skip(); /* TSan cannot follow a worker started in a fork child (see test_fork.c) */
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
    skip();
#endif
#endif
    shared->child_ticks = shared->grandchild_ticks = UINT64_MAX;
    int rc = hwtt_run_in_child(process_4094_forks_deep, NULL, hwtt_slack_ms(30000));
    print_message("  generation 4095 (child): %llu ticks; generation 4096 (grandchild): %llu; "
                  "status %d\n",
                  (unsigned long long)shared->child_ticks,
                  (unsigned long long)shared->grandchild_ticks, rc);
    assert_int_equal(rc, 0);
    assert_int_equal(shared->grandchild_ticks, shared->child_ticks);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_inherited_ticks_stop_at_the_fork_not_when_the_child_runs,
                                  hwtt_teardown_timers),
        cmocka_unit_test(test_ticks_stand_still_in_a_grandchild_4094_forks_deep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
