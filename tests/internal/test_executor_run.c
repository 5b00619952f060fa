/*
 * test_executor_run.c - hwt_timeout_run gives the executor's reference back
 * however its task ends, also when the task ends the executor's thread
 * (pthread_exit, or a pthread_cancel acted on at a cancellation point):
 * otherwise the timeout, and the timer with it, would never be freed. The
 * references are read inside the timeout (internal.h), as nothing public
 * shows them.
 */
#include <pthread.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"

/* The executor keeps the one timeout it is handed, for a thread to run. */
static struct {
    hwt_timeout *_Atomic handed;
} executor;

static void keep(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    atomic_store(&executor.handed, timeout);
}

static atomic_int task_started;

static void cancel_own_thread(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&task_started, 1);
    pthread_cancel(pthread_self());
    pthread_testcancel();
}

static void exit_own_thread(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&task_started, 1);
    pthread_exit(NULL);
}

static void *run_handed(void *arg)
{
    hwt_timeout_run(arg);
    return (void *)1; /* not reached: the task ends the thread */
}

/* Schedules `task` with a handle, runs it on a thread of its own as the
 * executor, and checks that only the handle's reference is left. */
static void check_run_ending_its_thread(hwt_task_fn task)
{
    memset(&executor, 0, sizeof executor);
    atomic_store(&task_started, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = keep;
    hwt_timer *timer = hwtt_timer_opts(&o);
    hwt_timeout *handle;
    assert_int_equal(hwt_new_timeout(timer, task, NULL, 0, HWT_MILLISECONDS, &handle), 0);
    assert_true(hwtt_wait_until(atomic_load(&executor.handed) != NULL, 5000));
    assert_ptr_equal(atomic_load(&executor.handed), handle);

    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, run_handed, handle), 0);
    void *result = NULL;
    assert_int_equal(pthread_join(thread, &result), 0);
    assert_int_equal(atomic_load(&task_started), 1);
    assert_true(result != (void *)1);
    assert_int_equal(atomic_load(&handle->refs), 1); /* the handle's alone */
    hwt_timeout_release(handle);
    hwt_timer_destroy(timer);
}

static void test_a_task_that_cancels_its_thread_gives_the_reference_back(void **state)
{
    (void)state;
    check_run_ending_its_thread(cancel_own_thread);
}

static void test_a_task_that_exits_its_thread_gives_the_reference_back(void **state)
{
    (void)state;
    check_run_ending_its_thread(exit_own_thread);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_task_that_cancels_its_thread_gives_the_reference_back),
        cmocka_unit_test(test_a_task_that_exits_its_thread_gives_the_reference_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
