/*
 * canary.c - hwt-canary: finds the spells in which this machine runs slow.
 *
 *   hwt-canary [seconds=S] [period_us=2000]
 *   spell from_ns=... to_ns=...        (one line per spell)
 *   canary samples=... spell_ms=... spells=... longest_ms=... slowest_x=...
 *
 * Every period it times one fixed piece of arithmetic (~2 us: no memory,
 * no system call) and compares it with the fastest it has seen (and with
 * the fastest of 20 at the start, should it start in a spell). On the
 * project's VMs the whole machine - every vCPU at once, memory, the clock
 * read - runs 3-6 times slower for 20-120 ms at a time, a few times in ten
 * seconds, with nothing shown as steal (bench/README.md, "Slow spells").
 * A sample that took 2.5 times the fastest or more is slow; two or more
 * slow samples in a row are a spell (one alone may be an interrupt or a
 * preemption), from its first slow sample to the next fast one
 * (CLOCK_MONOTONIC ns, as the benchmarks' timed_from_ns and timed_to_ns).
 * spell_ms: the time in spells; spells: how many; longest_ms; slowest_x:
 * the slowest sample over the fastest.
 *
 * Without seconds= it runs until SIGTERM or SIGINT and then prints its
 * lines: bench/with-steal runs it beside every benchmark run this way. It
 * costs under 1 % of one CPU (the work and a wake-up per period).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define SLOW_FACTOR 2.5
#define WORK_STEPS 1500 /* ~2 us of dependent multiplies here */

static volatile sig_atomic_t stop;
static volatile uint64_t sink; /* keeps the work from being optimised away */

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* A chain of dependent multiply-adds: its time is the CPU's speed alone. */
static uint64_t work(uint64_t x)
{
    for (int i = 0; i < WORK_STEPS; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

struct spell {
    int64_t from, to;
};

static struct spell *add_spell(struct spell *list, size_t *n, int64_t from, int64_t to,
                               int64_t *total, int64_t *longest)
{
    list = realloc(list, (*n + 1) * sizeof *list);
    if (list == NULL) {
        fprintf(stderr, "hwt-canary: out of memory\n");
        exit(1);
    }
    list[(*n)++] = (struct spell){from, to};
    *total += to - from;
    if (to - from > *longest)
        *longest = to - from;
    return list;
}

int main(int argc, char **argv)
{
    double seconds = 0;
    long period_us = 2000;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "seconds=", 8) == 0)
            seconds = atof(argv[i] + 8);
        else if (strncmp(argv[i], "period_us=", 10) == 0)
            period_us = atol(argv[i] + 10);
        else {
            fprintf(stderr, "usage: hwt-canary [seconds=S] [period_us=2000]\n");
            return 2;
        }
    }
    if (period_us < 100)
        period_us = 100;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    const int64_t period = period_us * 1000;
    const int64_t start = bench_now_ns();
    const int64_t end = seconds > 0 ? start + (int64_t)(seconds * 1e9) : INT64_MAX;
    int64_t fastest = INT64_MAX, slowest = 0, next = start, longest = 0, in_spells = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t0 = bench_now_ns();
        sink = work(sink);
        int64_t took = bench_now_ns() - t0;
        if (took < fastest)
            fastest = took;
    }
    int64_t run_from = 0; /* the first slow sample of the current run of them */
    size_t samples = 0, run = 0, spells = 0;
    struct spell *list = NULL;
    while (!stop && bench_now_ns() < end) {
        int64_t t0 = bench_now_ns();
        sink = work(sink);
        int64_t took = bench_now_ns() - t0;
        samples++;
        if (took < fastest)
            fastest = took;
        if (took > slowest)
            slowest = took;
        if ((double)took >= SLOW_FACTOR * (double)fastest) {
            if (run++ == 0)
                run_from = t0;
        } else {
            if (run >= 2)
                list = add_spell(list, &spells, run_from, t0, &in_spells, &longest);
            run = 0;
        }
        next += period;
        if (next < bench_now_ns()) /* it could not run for a while: no catching up */
            next = bench_now_ns();
        struct timespec ts = {.tv_sec = next / 1000000000, .tv_nsec = next % 1000000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    if (run >= 2)
        list = add_spell(list, &spells, run_from, bench_now_ns(), &in_spells, &longest);
    for (size_t i = 0; i < spells; i++)
        printf("spell from_ns=%" PRId64 " to_ns=%" PRId64 "\n", list[i].from, list[i].to);
    printf("canary samples=%zu spell_ms=%.1f spells=%zu longest_ms=%.1f slowest_x=%.1f\n", samples,
           (double)in_spells / 1e6, spells, (double)longest / 1e6,
           fastest > 0 && fastest != INT64_MAX ? (double)slowest / (double)fastest : 0.0);
    free(list);
    return 0;
}
