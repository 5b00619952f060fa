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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
