/*
 * test_unload.c - a program that loads the library with dlopen and unloads
 * it with dlclose while a thread that scheduled on one of its timers is
 * still alive (the timer destroyed first, as dlclose needs). That thread's
 * exit must not call into the unloaded library: the library's thread-exit
 * destructor (a pthread key's, for the thread's timeout caches) is
 * unregistered as the library unloads. Not linked with the library (it
 * would never unload, and so is not tests/helpers.c, which calls it): it
 * loads HWT_TEST_LIBRARY_FILE. In a child, so that a crash fails the test
 * instead of ending it; the child's alarm ends a hang.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "hwtimer.h"

typedef void (*options_init_fn)(hwt_options *);
typedef int (*create_fn)(hwt_timer **, const hwt_options *);
typedef int (*new_timeout_fn)(hwt_timer *, hwt_task_fn, void *, int64_t, hwt_unit,
                              hwt_timeout **);
typedef void (*destroy_fn)(hwt_timer *);

static void *lib;
static atomic_int stage; /* 1: the thread scheduled; 2: it may exit */
static atomic_int scheduled_rc;

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* Schedules (binding its timeout cache to the timer), then waits until
 * the library is unloaded, and exits. */
static void *scheduler(void *timer)
{
    new_timeout_fn new_timeout = (new_timeout_fn)(uintptr_t)dlsym(lib, "hwt_new_timeout");
    atomic_store(&scheduled_rc, new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL));
    atomic_store(&stage, 1);
    while (atomic_load(&stage) != 2)
        usleep(200);
    return NULL;
}

static int load_schedule_unload(void *unused)
{
    (void)unused;
    lib = dlopen(HWT_TEST_LIBRARY_FILE, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return 10;
    hwt_options o;
    ((options_init_fn)(uintptr_t)dlsym(lib, "hwt_options_init"))(&o);
    hwt_timer *timer;
    if (((create_fn)(uintptr_t)dlsym(lib, "hwt_timer_create"))(&timer, &o) != 0)
        return 11;
    pthread_t thread;
    if (pthread_create(&thread, NULL, scheduler, timer) != 0)
        return 12;
    while (atomic_load(&stage) != 1)
        usleep(200);
    if (atomic_load(&scheduled_rc) != 0)
        return 13;
    ((destroy_fn)(uintptr_t)dlsym(lib, "hwt_timer_destroy"))(timer);
    if (dlclose(lib) != 0)
        return 14;
    /* Unloaded for good, or this test proves nothing. */
    if (dlopen(HWT_TEST_LIBRARY_FILE, RTLD_NOW | RTLD_NOLOAD) != NULL)
        return 15;
    atomic_store(&stage, 2);
    pthread_join(thread, NULL); /* its exit runs the thread's key destructors */
    return 0;
}

static void test_a_thread_outlives_the_unloaded_library(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* cmocka's handlers would turn a crash into an exit status */
        int crashes[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
        for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++)
            signal(crashes[i], SIG_DFL);
        alarm(120); /* generous: sanitizers and qemu are slow */
        _exit(load_schedule_unload(NULL));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        print_message("  the child died of signal %d (%s)\n", WTERMSIG(status),
                      WTERMSIG(status) == SIGALRM ? "hung" : "crashed");
    else
        print_message("  the child exited with %d\n", WEXITSTATUS(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_thread_outlives_the_unloaded_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
