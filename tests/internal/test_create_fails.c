/*
 * test_create_fails.c - hwt_timer_create when a system object cannot be
 * had: the fork handlers cannot be registered, a mutex or the condition
 * cannot be initialised. Each gives HWT_ESYS with its cause logged (SPEC:
 * HWT_ESYS), leaves *out alone, leaks nothing (ASan, valgrind), and the
 * next create works. Those calls do not fail on demand: this executable is
 * linked with -Wl,--wrap for them (tests/CMakeLists.txt), and the wrappers
 * below fail the call chosen.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"

int __real_pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
int __real_pthread_mutex_init(pthread_mutex_t *mutex, const pthread_mutexattr_t *attr);
int __real_pthread_cond_init(pthread_cond_t *cond, const pthread_condattr_t *attr);

/* True from the start: the registration when the library is loaded (a
 * constructor, timer.c) fails, so the first create must register. */
static atomic_bool fail_atfork = true;
static atomic_int fail_mutex_init_at; /* the k-th call from now fails; 0: none */
static atomic_int mutex_inits;
static atomic_bool fail_cond_init;

int __wrap_pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    if (atomic_load(&fail_atfork))
        return ENOMEM;
    return __real_pthread_atfork(prepare, parent, child);
}

int __wrap_pthread_mutex_init(pthread_mutex_t *mutex, const pthread_mutexattr_t *attr)
{
    int k = atomic_load(&fail_mutex_init_at);
    if (k > 0 && atomic_fetch_add(&mutex_inits, 1) + 1 == k)
        return EAGAIN;
    return __real_pthread_mutex_init(mutex, attr);
}

int __wrap_pthread_cond_init(pthread_cond_t *cond, const pthread_condattr_t *attr)
{
    if (atomic_load(&fail_cond_init))
        return EAGAIN;
    return __real_pthread_cond_init(cond, attr);
}

/* A failed test must not leave the next one's creates failing. */
static int stop_failing(void **state)
{
    (void)state;
    atomic_store(&fail_atfork, false);
    atomic_store(&fail_mutex_init_at, 0);
    atomic_store(&fail_cond_init, false);
    return 0;
}

struct log_record {
    int errors;
    char last[256];
};

static void record_log(void *ctx, hwt_log_level level, const char *message)
{
    struct log_record *r = ctx;
    if (level == HWT_LOG_ERROR) {
        r->errors++;
        snprintf(r->last, sizeof r->last, "%s", message);
    }
}

/* One create that must fail with HWT_ESYS and log `cause` (and strerror's
 * text of the error injected), then one that works. */
static void expect_esys(const char *cause, const char *error_text)
{
    struct log_record log = {0};
    hwt_options o;
    hwt_options_init(&o);
    o.log = record_log;
    o.log_ctx = &log;
    hwt_timer *timer = (hwt_timer *)&log; /* must be left alone */
    assert_int_equal(hwt_timer_create(&timer, &o), HWT_ESYS);
    assert_ptr_equal(timer, (hwt_timer *)&log);
    assert_int_equal(log.errors, 1);
    if (strstr(log.last, cause) == NULL || strstr(log.last, error_text) == NULL)
        fail_msg("logged \"%s\", expected \"%s\" and \"%s\"", log.last, cause, error_text);
}

static void expect_create_works(void)
{
    hwt_timer *timer = NULL;
    assert_int_equal(hwt_timer_create(&timer, NULL), 0);
    atomic_int ran = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(5000)));
    hwt_timer_destroy(timer);
}

/* First in this process: the load-time registration failed (fail_atfork),
 * so each create tries again, and the first that succeeds registers. */
static void test_fork_handlers_cannot_be_registered(void **state)
{
    (void)state;
    atomic_store(&fail_atfork, true);
    expect_esys("fork handlers", strerror(ENOMEM));
    atomic_store(&fail_atfork, false);
    expect_create_works();
}

/* The pool's lock, then the timer's two: whichever fails, nothing stays. */
static void test_a_mutex_cannot_be_initialised(void **state)
{
    (void)state;
    const char *causes[] = {"pool's lock", "lock or condition", "lock or condition"};
    for (int k = 1; k <= 3; k++) {
        atomic_store(&mutex_inits, 0);
        atomic_store(&fail_mutex_init_at, k);
        expect_esys(causes[k - 1], strerror(EAGAIN));
        atomic_store(&fail_mutex_init_at, 0);
    }
    expect_create_works();
}

static void test_the_condition_cannot_be_initialised(void **state)
{
    (void)state;
    atomic_store(&fail_cond_init, true);
    expect_esys("lock or condition", strerror(EAGAIN));
    atomic_store(&fail_cond_init, false);
    expect_create_works();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fork_handlers_cannot_be_registered, stop_failing),
        cmocka_unit_test_teardown(test_a_mutex_cannot_be_initialised, stop_failing),
        cmocka_unit_test_teardown(test_the_condition_cannot_be_initialised, stop_failing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
