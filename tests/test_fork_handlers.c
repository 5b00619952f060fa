/*
 * test_fork_handlers.c - the application's own fork() handlers calling the
 * library, and a fork() from a log callback on the worker.
 *
 * main() registers the application's pthread_atfork handlers first thing,
 * after the library was loaded, as a program does. The handlers do nothing
 * until a test switches one on. fork() runs prepare handlers newest first
 * and the others oldest first, so each promise below needs the library's
 * handlers to be registered before these (when it is loaded): its prepare
 * handler then runs after the application's, its child handler before.
 *
 * A test's forks happen in a "driver" process of its own, so that a hang
 * is a failed test (the driver killed) and not the suite's watchdog, and so
 * that what one test leaves in a child's handlers does not reach the next.
 * Findings cross processes through a shared page.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

enum {
    REACHED_CALL = 1,       /* a handler is in its call */
    RETURNED_FROM_CALL = 2, /* the call returned */
};

/* The shared page: what the handlers and the children found. */
static struct findings {
    int schedule_rc;  /* hwt_new_timeout on the inherited timer, in the child handler */
    int create_rc;    /* hwt_timer_create, in a handler */
    int child_step;   /* REACHED_CALL / RETURNED_FROM_CALL, in the child handler */
    int parent_step;  /* the same, in the parent handler */
    int prepare_step; /* the same, in the prepare handler */
    atomic_int log_child; /* the child forked in the log callback (a pid) */
} *found;

enum handler_action { DO_NOTHING, USE_INHERITED, CREATE_TIMER, DESTROY_TIMER };

static atomic_int child_action, parent_action, prepare_action;
static hwt_timer *app_timer; /* the timer the handlers act on */

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static int create_and_destroy(void)
{
    hwt_timer *mine = NULL;
    int rc = hwt_timer_create(&mine, NULL);
    if (rc == 0)
        hwt_timer_destroy(mine);
    return rc;
}

static void app_prepare(void)
{
    if (atomic_load(&prepare_action) != DESTROY_TIMER)
        return;
    found->prepare_step = REACHED_CALL;
    hwt_timer_destroy(app_timer); /* quiescing its threads before the fork */
    found->prepare_step = RETURNED_FROM_CALL;
}

static void app_parent(void)
{
    if (atomic_load(&parent_action) != CREATE_TIMER)
        return;
    found->parent_step = REACHED_CALL;
    found->create_rc = create_and_destroy();
    found->parent_step = RETURNED_FROM_CALL;
}

/* In the child: a hang ends it with SIGALRM. */
static void app_child(void)
{
    int action = atomic_load(&child_action);
    if (action == DO_NOTHING)
        return;
    hwtt_watchdog(10);
    found->child_step = REACHED_CALL;
    if (action == USE_INHERITED) {
        found->schedule_rc = hwt_new_timeout(app_timer, noop, NULL, 1, HWT_HOURS, NULL);
        hwt_timer_destroy(app_timer);
    } else {
        found->create_rc = create_and_destroy();
    }
    found->child_step = RETURNED_FROM_CALL;
}

/* Runs fn in a driver process, with fresh findings: its exit status, 128 +
 * a signal that ended it, or HWTT_CHILD_HUNG. */
static int in_driver(int (*fn)(void *))
{
    memset(found, 0, sizeof *found);
    return hwtt_run_in_child(fn, NULL, hwtt_slack_ms(20000));
}

/* Forks a child that ends at once (after the handlers); its exit status,
 * or 128 + the signal that ended it. */
static int fork_a_child(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return 127;
    if (pid == 0)
        _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A started timer with a pending timeout, in app_timer: 0, or 90. */
static int start_app_timer(void)
{
    if (hwt_timer_create(&app_timer, NULL) != 0 ||
        hwt_new_timeout(app_timer, noop, NULL, 1, HWT_HOURS, NULL) != 0)
        return 90;
    return 0;
}

/* ---------------------------------------------------------------- tests */

static int child_handler_uses_the_inherited_timer(void *unused)
{
    (void)unused;
    if (start_app_timer() != 0)
        return 90;
    atomic_store(&child_action, USE_INHERITED);
    int child = fork_a_child();
    if (child != 0 || found->child_step != RETURNED_FROM_CALL)
        return 10; /* the destroy did not return in the child */
    if (found->schedule_rc != HWT_ESTOPPED)
        return 11; /* the inherited timer was not stopped yet */
    hwt_timer_destroy(app_timer);
    return 0;
}

/* A child handler that cleans up what the parent left: the inherited timer
 * is stopped there already (HWT_ESTOPPED, a destroy that returns). */
static void test_a_child_handler_finds_inherited_timers_stopped(void **state)
{
    (void)state;
    assert_int_equal(in_driver(child_handler_uses_the_inherited_timer), 0);
}

static int child_handler_creates_a_timer(void *unused)
{
    (void)unused;
    if (start_app_timer() != 0)
        return 90;
    atomic_store(&child_action, CREATE_TIMER);
    int child = fork_a_child();
    if (child != 0 || found->child_step != RETURNED_FROM_CALL)
        return 20; /* the create did not return in the child */
    if (found->create_rc != 0)
        return 21;
    hwt_timer_destroy(app_timer);
    return 0;
}

static void test_a_child_handler_creates_a_timer(void **state)
{
    (void)state;
    assert_int_equal(in_driver(child_handler_creates_a_timer), 0);
}

static int parent_handler_creates_a_timer(void *unused)
{
    (void)unused;
    if (start_app_timer() != 0)
        return 90;
    atomic_store(&parent_action, CREATE_TIMER);
    if (fork_a_child() != 0)
        return 30;
    if (found->parent_step != RETURNED_FROM_CALL || found->create_rc != 0)
        return 31;
    hwt_timer_destroy(app_timer);
    return 0;
}

static void test_a_parent_handler_creates_a_timer(void **state)
{
    (void)state;
    assert_int_equal(in_driver(parent_handler_creates_a_timer), 0);
}

static int prepare_handler_destroys_a_timer(void *unused)
{
    (void)unused;
    if (start_app_timer() != 0)
        return 90;
    atomic_store(&prepare_action, DESTROY_TIMER);
    if (fork_a_child() != 0)
        return 40;
    return found->prepare_step == RETURNED_FROM_CALL ? 0 : 41;
}

/* A prepare handler that ends its background threads before the fork. */
static void test_a_prepare_handler_destroys_a_timer(void **state)
{
    (void)state;
    assert_int_equal(in_driver(prepare_handler_destroys_a_timer), 0);
}

/* The log callback forks on the worker and returns in the child: the worker
 * logs as it starts when its thread has no key for its timeout cache (every
 * key taken, as test_thread_key does; the producer then logs too, but does
 * not fork). The child must end (docs: it calls _exit(0)), not go on as
 * the parent's worker. */
#define LOG_WORKER_NAME "hwt-fh-log"
static atomic_int log_calls;

static void forking_log(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)level;
    (void)message;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (strcmp(name, LOG_WORKER_NAME) != 0 || atomic_fetch_add(&log_calls, 1) != 0)
        return; /* a producer's log, or not the first */
    pid_t pid = fork();
    if (pid > 0)
        atomic_store(&found->log_child, pid);
}

static int log_callback_forks_on_the_worker(void *unused)
{
    (void)unused;
    enum { MAX_KEYS = 1 << 16 };
    static pthread_key_t keys[MAX_KEYS];
    hwt_options o;
    hwt_options_init(&o);
    o.log = forking_log;
    o.thread_name = LOG_WORKER_NAME;
    hwt_timer *t = NULL;
    if (hwt_timer_create(&t, &o) != 0)
        return 90;
    size_t n = 0;
    while (n < MAX_KEYS && pthread_key_create(&keys[n], NULL) == 0)
        n++;
    (void)hwt_new_timeout(t, noop, NULL, 1, HWT_HOURS, NULL); /* HWT_ESYS here: no key */
    if (!hwtt_wait_until(atomic_load(&found->log_child) > 0, hwtt_slack_ms(5000)))
        return 91; /* the worker did not log: the test proves nothing */
    pid_t pid = atomic_load(&found->log_child);
    int status = 0;
    if (!hwtt_wait_until(waitpid(pid, &status, WNOHANG) == pid, hwtt_slack_ms(5000))) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return 50; /* the child went on as the parent's worker */
    }
    while (n > 0)
        pthread_key_delete(keys[--n]);
    hwt_timer_destroy(t);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 51;
}

static void test_a_log_callback_that_forks_on_the_worker(void **state)
{
    (void)state;
    assert_int_equal(in_driver(log_callback_forks_on_the_worker), 0);
}

int main(void)
{
    pthread_atfork(app_prepare, app_parent, app_child); /* after the library's */
    found = mmap(NULL, sizeof *found, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (found == MAP_FAILED)
        return 1;
    hwtt_watchdog(240);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_child_handler_finds_inherited_timers_stopped),
        cmocka_unit_test(test_a_child_handler_creates_a_timer),
        cmocka_unit_test(test_a_parent_handler_creates_a_timer),
        cmocka_unit_test(test_a_prepare_handler_destroys_a_timer),
        cmocka_unit_test(test_a_log_callback_that_forks_on_the_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
