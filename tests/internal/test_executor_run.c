/*
 * test_executor_run.c - hwt_timeout_run gives the executor's reference back
 * however its task ends, also when the task ends the executor's thread
 * (pthread_exit, or a pthread_cancel acted on at a cancellation point):
 * otherwise the timeout, and the timer with it, would never be freed. The
 * references are read inside the timeout (internal.h), as nothing public
 * shows them. A task that leaves hwt_timeout_run another way (a C++
 * exception, longjmp) leaves nothing behind in its thread: the thread may
 * still end with pthread_exit.
 */
#include <pthread.h>
#include <setjmp.h>
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

/* Leaves hwt_timeout_run by longjmp, then ends the thread with pthread_exit,
 * whose unwinding runs every cleanup still registered in the thread. */
static _Thread_local jmp_buf out_of_the_task;

static void jump_out(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&task_started, 1);
    longjmp(out_of_the_task, 1);
}

static void *run_then_exit(void *arg)
{
    if (setjmp(out_of_the_task) == 0)
        hwt_timeout_run(arg);
    pthread_exit((void *)2);
}

/* Schedules `task` with a handle and hands it to the executor. */
static hwt_timer *handed_over(hwt_task_fn task, hwt_timeout **handle)
{
    memset(&executor, 0, sizeof executor);
    atomic_store(&task_started, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = keep;
    hwt_timer *timer = hwtt_timer_opts(&o);
    assert_int_equal(hwt_new_timeout(timer, task, NULL, 0, HWT_MILLISECONDS, handle), 0);
    assert_true(hwtt_wait_until(atomic_load(&executor.handed) != NULL, 5000));
    assert_ptr_equal(atomic_load(&executor.handed), *handle);
    return timer;
}

/* Runs the handed-over timeout through `body` on a thread of its own, as
 * the executor would; returns what the thread ended with, once its task
 * has started. */
static void *run_on_a_thread(void *(*body)(void *), hwt_timeout *handle)
{
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, body, handle), 0);
    void *result = NULL;
    assert_int_equal(pthread_join(thread, &result), 0);
    assert_int_equal(atomic_load(&task_started), 1);
    return result;
}

/* Runs `task` on a thread of its own as the executor, and checks that only
 * the handle's reference is left. */
static void check_run_ending_its_thread(hwt_task_fn task)
{
    hwt_timeout *handle;
    hwt_timer *timer = handed_over(task, &handle);
    assert_true(run_on_a_thread(run_handed, handle) != (void *)1);
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

/* The thread survives its task's longjmp and ends with pthread_exit. The
 * executor's reference is lost that way (no cleanup runs): the test gives
 * it back itself. */
static void test_a_task_that_jumps_out_leaves_its_thread_whole(void **state)
{
    (void)state;
    hwt_timeout *handle;
    hwt_timer *timer = handed_over(jump_out, &handle);
    assert_ptr_equal(run_on_a_thread(run_then_exit, handle), (void *)2);
    assert_int_equal(atomic_load(&handle->refs), 2);
    hwt_timeout_release(handle); /* the executor's */
    hwt_timeout_release(handle);
    hwt_timer_destroy(timer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_task_that_cancels_its_thread_gives_the_reference_back),
        cmocka_unit_test(test_a_task_that_exits_its_thread_gives_the_reference_back),
        cmocka_unit_test(test_a_task_that_jumps_out_leaves_its_thread_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
