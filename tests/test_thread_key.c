/*
 * test_thread_key.c - a thread key the library needs and cannot have: with
 * every pthread key of the process taken, a schedule fails with HWT_ESYS,
 * logs why, and changes nothing; once a key is free again the next schedule
 * works (the library retries: the failure is not remembered).
 *
 * Runs in a forked child (the test process keeps its keys), and must be the
 * first thing in its process to schedule a timeout: the library makes its
 * key on first need, so this suite holds this one test only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* In the child: cmocka's asserts belong to the parent. Exits with the
 * failing line. */
#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            _exit(__LINE__ % 250 + 1);                                                             \
        }                                                                                          \
    } while (0)

enum { MAX_KEYS = 1 << 16 };

static void child(void)
{
    hwtt_log log = {0};
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *timer = NULL;
    CHILD_CHECK(hwt_timer_create(&timer, &o) == 0);

    static pthread_key_t keys[MAX_KEYS];
    size_t n = 0;
    while (n < MAX_KEYS && pthread_key_create(&keys[n], NULL) == 0)
        n++;
    CHILD_CHECK(n > 0 && n < MAX_KEYS);

    hwt_timeout *t = NULL;
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &t) == HWT_ESYS);
    CHILD_CHECK(t == NULL);
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL) == HWT_ESYS);
    CHILD_CHECK(hwt_pending_timeouts(timer) == 0);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    CHILD_CHECK(st.scheduled == 0 && st.rejected == 0 && st.cancelled == 0);
    CHILD_CHECK(atomic_load(&log.count[HWT_LOG_ERROR]) > 0);

    CHILD_CHECK(pthread_key_delete(keys[--n]) == 0);
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &t) == 0);
    CHILD_CHECK(t != NULL);
    CHILD_CHECK(hwt_pending_timeouts(timer) == 1);
    hwt_timer_stats(timer, &st);
    CHILD_CHECK(st.scheduled == 1);
    CHILD_CHECK(hwt_timeout_cancel(t));
    hwt_timeout_release(t);

    while (n > 0)
        pthread_key_delete(keys[--n]);
    hwt_timer_destroy(timer);
    _exit(0);
}

static void test_no_thread_key_is_esys_and_changes_nothing(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child();
    int status = 0;
    pid_t got;
    assert_true(hwtt_wait_until((got = waitpid(pid, &status, WNOHANG)) != 0, hwtt_slack_ms(20000)));
    assert_int_equal(got, pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_thread_key_is_esys_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
