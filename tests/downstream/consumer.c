/*
 * consumer.c - a program that uses an installed libhwtimer as a user would:
 * built by tests/downstream/check through pkg-config (shared and static) and
 * through find_package(hwtimer CONFIG). Exits 0 only if a 20 ms timeout ran.
 */
#define _POSIX_C_SOURCE 200809L
#include <hwtimer.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_int ran;

static void task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_store((atomic_int *)arg, 1);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int main(void)
{
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", HWT_VERSION_MAJOR, HWT_VERSION_MINOR,
             HWT_VERSION_PATCH);
    if (strcmp(hwt_version(), expected) != 0) {
        fprintf(stderr, "consumer: hwt_version() is %s, the header says %s\n", hwt_version(),
                expected);
        return 1;
    }

    hwt_options options;
    hwt_options_init(&options);
    options.tick_duration = 10;
    options.tick_unit = HWT_MILLISECONDS;

    hwt_timer *timer = NULL;
    int rc = hwt_timer_create(&timer, &options);
    if (rc != 0) {
        fprintf(stderr, "consumer: hwt_timer_create: %s\n", hwt_strerror(rc));
        return 1;
    }
    rc = hwt_new_timeout(timer, task, &ran, 20, HWT_MILLISECONDS, NULL);
    if (rc != 0) {
        fprintf(stderr, "consumer: hwt_new_timeout: %s\n", hwt_strerror(rc));
        hwt_timer_destroy(timer);
        return 1;
    }

    int64_t deadline = now_ms() + 5000;
    while (!atomic_load(&ran) && now_ms() < deadline) {
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&pause, NULL);
    }

    rc = hwt_stop(timer, NULL, NULL);
    hwt_timer_destroy(timer);
    if (rc != 0) {
        fprintf(stderr, "consumer: hwt_stop: %s\n", hwt_strerror(rc));
        return 1;
    }
    if (!atomic_load(&ran)) {
        fprintf(stderr, "consumer: the timeout did not run within 5 s\n");
        return 1;
    }
    printf("consumer: libhwtimer %s ok\n", hwt_version());
    return 0;
}
