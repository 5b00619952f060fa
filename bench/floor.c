/*
 * floor.c - hwt-floor: what one schedule cannot go below on this machine,
 * for the design the SPEC prescribes (a CLOCK_MONOTONIC read for the
 * deadline, one ck_fifo_mpmc_enqueue to hand the timeout to the worker):
 *
 *   hwt-floor [n=10000000]
 *   floor clock_ns=... enqueue_1t_ns=... enqueue_2t_ns=... lock_add_ns=...
 *
 * enqueue_2t_ns is wall time / items with two threads enqueueing
 * preallocated entries into one fifo at once (the "~30 ns"
 * reference figure); nothing is dequeued.
 */
#define _GNU_SOURCE
#include <ck_fifo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static ck_fifo_mpmc_t fifo;
static ck_fifo_mpmc_entry_t *entries;
static long per_thread;
static pthread_barrier_t barrier;

static void *enqueue_range(void *arg)
{
    ck_fifo_mpmc_entry_t *mine = entries + 1 + (long)arg * per_thread;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < per_thread; i++)
        ck_fifo_mpmc_enqueue(&fifo, &mine[i], &mine[i]);
    return NULL;
}

/* ns per enqueue with `threads` threads at once (entries pre-faulted). */
static double enqueue_ns(long n, int threads)
{
    per_thread = n / threads;
    memset(entries, 0, sizeof *entries * (size_t)(n + 1));
    ck_fifo_mpmc_init(&fifo, &entries[0]);
    pthread_t th[2];
    pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
    for (long t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, enqueue_range, (void *)t);
    long long t0 = now_ns();
    pthread_barrier_wait(&barrier);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    long long wall = now_ns() - t0;
    pthread_barrier_destroy(&barrier);
    return (double)wall / (double)(per_thread * threads);
}

int main(int argc, char **argv)
{
    long n = 10000000;
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "n=", 2) == 0)
            n = atol(argv[i] + 2);
    if (n < 2) {
        fprintf(stderr, "usage: hwt-floor [n=ITEMS >= 2]\n");
        return 2;
    }
    long long sink = 0, t0 = now_ns();
    for (long i = 0; i < n; i++)
        sink += now_ns();
    double clock_ns = (double)(now_ns() - t0) / (double)n;

    entries = aligned_alloc(64, sizeof *entries * (size_t)(n + 1));
    if (entries == NULL)
        return 1;
    double e1 = enqueue_ns(n, 1), e2 = enqueue_ns(n, 2);

    static _Atomic long counter;
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        atomic_fetch_add(&counter, 1);
    double lock_ns = (double)(now_ns() - t0) / (double)n;
    free(entries);
    printf("floor n=%ld clock_ns=%.1f enqueue_1t_ns=%.1f enqueue_2t_ns=%.1f lock_add_ns=%.1f"
           " (sink %lld)\n",
           n, clock_ns, e1, e2, lock_ns, sink & 1);
    return 0;
}
