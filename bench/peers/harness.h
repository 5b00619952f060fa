/*
 * harness.h - the workloads of hwt-bench, for the peers libhwtimer is
 * compared with (libevent, Boost.Asio, timerfd + epoll, a wheel behind a
 * mutex). Each peer is one file that fills a struct bench_peer and calls
 * bench_main(); harness.c runs the workloads and prints the line
 *
 *   PEER WORKLOAD key=value ...
 *
 * with the keys of hwt-bench (see the top of bench/hwt-bench.c) and the same
 * splitmix64 delays, both from bench/common.h (which also gives the peers
 * bench_die, bench_now_ns and bench_xmalloc), so that bench/compare-peers
 * can put every side in one table.
 *
 * A peer keeps timer objects in slots 0 .. n-1, created in advance (before
 * anything is timed): that is how every peer here is meant to be used - a
 * connection owns its struct event, its steady_timer, its timerfd - whereas
 * libhwtimer allocates its timeout inside hwt_new_timeout. A slot is used by
 * one thread at a time (the harness hands each thread its own indices), so
 * peers whose documentation calls distinct objects safe from distinct
 * threads are used within that promise.
 *
 * Usable from C and C++ (the Asio twin).
 */
#ifndef HWT_BENCH_HARNESS_H
#define HWT_BENCH_HARNESS_H

#include "../common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The peer's worker thread names itself so (bench_worker_named); the harness
 * finds it in /proc/self/task to watch its CPU time. */
#define BENCH_WORKER_NAME "peer-worker"

/* What a slot's task does when it runs. */
enum bench_task {
    BENCH_NOOP,  /* nothing */
    BENCH_RECORD /* calls bench_task_ran(slot) */
};

struct bench_peer {
    /* First word of the output line; a key may change it (libevent's
     * precise=1 makes it "libevent-precise"). */
    const char *name;
    /* "version=... " words for `PROGRAM version`. */
    const char *(*version)(void);
    /* A peer-specific key=value; returns 0 if the key is unknown. May be NULL. */
    int (*key)(const char *k, const char *v);
    /* Creates the timer, starts its worker thread (which calls
     * bench_worker_named() first) and schedules one 1-hour timeout on it, so
     * that start-up is never measured. */
    void *(*create)(const struct bench_config *c);
    /* Creates n timer objects in slots 0 .. n-1, each running `task`. Once per
     * timer, before any arm. */
    void (*slots)(void *t, size_t n, enum bench_task task);
    /* Schedules slot i (not pending) to run in delay_ns (>= 0). Any thread. */
    void (*arm)(void *t, size_t i, int64_t delay_ns);
    /* Cancels slot i; returns 1 if a pending timeout was cancelled. Any thread. */
    int (*cancel)(void *t, size_t i);
    /* Cancels slot i if pending and schedules it again (churn), the way the
     * peer's documentation resets a timer; returns 1 if it cancelled a
     * pending timeout (0 if the peer cannot tell). Any thread. */
    int (*rearm)(void *t, size_t i, int64_t delay_ns);
    /* 1 once the work the calls so far left to the worker is done, given how
     * many cancels (and re-arms) returned 1 on this timer (Asio: the handlers
     * of that many cancelled waits have run). NULL: always. Main thread. */
    int (*settled)(void *t, uint64_t cancels);
    /* Stops the worker and frees the timer and the slots. */
    void (*destroy)(void *t);
    /* 1 if the timeouts live in kernel memory (timerfd): the memory workload
     * then counts /proc/meminfo's Slab and VmallocUsed growth too. */
    int kernel_memory;
};

/* Runs `PROGRAM WORKLOAD key=value ...` or `PROGRAM version`; returns the
 * exit status. */
int bench_main(struct bench_peer *peer, int argc, char **argv);

/* Appends " key=value" words to the output line (after the figures): what
 * the reader needs to know of the peer's set-up (limits, flags). */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* For BENCH_RECORD tasks: slot i ran now. From the worker. */
void bench_task_ran(size_t i);
/* For a peer whose worker learns a task is due in a step that a re-arm can
 * race (timerfd: the read, then the record): the slot's sequence number
 * before that step, and the record after it. A run whose slot was re-armed
 * in between may be the replaced arm's: it is counted, but not judged early
 * against bounds that may be a later arm's. */
uint32_t bench_task_seq(size_t i);
void bench_task_ran_since(size_t i, uint32_t seq);

/* The worker thread's first call: names it BENCH_WORKER_NAME. */
void bench_worker_named(void);

#ifdef __cplusplus
}
#endif

#endif
