/*
 * floor.c - hwt-floor: what one schedule cannot go below on this machine:
 * a CLOCK_MONOTONIC read for the deadline, and handing the timeout to the
 * worker - one ck_stack_push_upmc on the thread's own stripe (what
 * libhwtimer does), or one ck_fifo_mpmc_enqueue (the reference):
 *
 *   hwt-floor [n=10000000] [sleep_s=0]
 *   floor clock_ns=... tsc_ns=... enqueue_1t_ns=... enqueue_2t_ns=...
 *         push_1t_ns=... push_2t_ns=... lock_add_ns=... pair_1t_ns=... pair_2t_ns=...
 *
 * tsc_ns is a plain TSC read (x86-64; -1 elsewhere), for comparison only:
 * libhwtimer reads CLOCK_MONOTONIC (clock_ns) for every deadline.
 *
 * With sleep_s=S it also measures the machine's own timing noise: a plain
 * thread sleeping 1 ms at a time (clock_nanosleep, absolute) for S seconds,
 * no library involved - how late any timer's worker may wake here (CPU
 * steal on a virtual machine shows up as tens of milliseconds).
 *
 * It also measures what new memory costs here, per 4 KiB page of 56 MiB
 * (what 1M pending timeouts take): first writes that fault each page in
 * (fault_ns), and with the pages faulted in beforehand by one
 * MADV_POPULATE_WRITE (populate_ns, the call; touch_ns, the first writes
 * after it - on some VMs each page's first touch still traps to the host).
 * A 4 KiB page holds ~73 timeouts. large_populate_us: us per 2 MiB of 32
 * MiB of new large pages populated with one call, as the pool takes its
 * regions - measured first of all, with pages nothing here used before.
 *
 * enqueue_2t_ns is wall time / items with two threads enqueueing
 * preallocated entries into one fifo at once (the "~30 ns"
 * reference figure); push_2t_ns the same with each thread pushing onto its
 * own stack (as two producers on two stripes do). Nothing is dequeued.
 *
 * pair_1t_ns and pair_2t_ns: what one churn pair (cancel an old timeout,
 * release its handle, schedule a new one) cannot go below in libhwtimer's
 * design, with one thread and with two at once (wall time / pairs): each
 * thread, on its own pre-faulted ring of 1000 slots and its own counters,
 * does only the pair's clock read and locked operations - the cancel's
 * state CAS, its count on the stripe, the handle's release, the schedule's
 * announce and its counted push (a double-width CAS) - with no allocation,
 * no worker and no line shared between the threads. A timer whose producers
 * must beat another's churn by 2x needs its pairs at half of that one's
 * wall time; this says whether that can be reached here at all.
 */
#define _GNU_SOURCE
#include <ck_fifo.h>
#include <ck_stack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

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

static struct {
    _Alignas(64) ck_stack_t stack;
} stacks[2];

static void *enqueue_range(void *arg)
{
    ck_fifo_mpmc_entry_t *mine = entries + 1 + (long)arg * per_thread;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < per_thread; i++)
        ck_fifo_mpmc_enqueue(&fifo, &mine[i], &mine[i]);
    return NULL;
}

/* The entries double as stack nodes: a fifo entry starts with a pointer. */
static void *push_range(void *arg)
{
    ck_fifo_mpmc_entry_t *mine = entries + 1 + (long)arg * per_thread;
    ck_stack_t *stack = &stacks[(long)arg].stack;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < per_thread; i++)
        ck_stack_push_upmc(stack, (ck_stack_entry_t *)&mine[i]);
    return NULL;
}

/* ns of wall time per item with `threads` (1 or 2) running `fn` at once,
 * per_thread items each, from when they are all released. */
static double wall_ns_per_item(int threads, void *(*fn)(void *))
{
    pthread_t th[2];
    pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
    for (long t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, fn, (void *)t);
    long long t0 = now_ns();
    pthread_barrier_wait(&barrier);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    long long wall = now_ns() - t0;
    pthread_barrier_destroy(&barrier);
    return (double)wall / (double)(per_thread * threads);
}

/* ns per enqueue (or push) with `threads` threads at once (entries
 * pre-faulted). */
static double enqueue_ns(long n, int threads, void *(*fn)(void *))
{
    per_thread = n / threads;
    memset(entries, 0, sizeof *entries * (size_t)(n + 1));
    memset(stacks, 0, sizeof stacks);
    ck_fifo_mpmc_init(&fifo, &entries[0]);
    return wall_ns_per_item(threads, fn);
}

#define PAIR_RING 1000

struct pair_slot {
    ck_stack_entry_t link;
    _Atomic unsigned state;
    _Atomic unsigned char refs;
    long long deadline;
};

/* One producer's own memory: its stripe's stack (16-byte aligned for the
 * double-width CAS) and counters, on lines no other thread writes. */
static struct pair_lane {
    _Alignas(64) ck_stack_t queue;
    _Atomic unsigned long started, cancelled;
    struct pair_slot ring[PAIR_RING];
} *lanes;

static void *pair_range(void *arg)
{
    struct pair_lane *lane = &lanes[(long)arg];
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < per_thread; i++) {
        struct pair_slot *s = &lane->ring[i % PAIR_RING];
        unsigned init = 0; /* cancel: the state CAS, the count, the release */
        atomic_compare_exchange_strong(&s->state, &init, 1);
        atomic_fetch_add(&lane->cancelled, 1);
        atomic_fetch_sub(&s->refs, 1);
        atomic_fetch_add(&lane->started, 1); /* schedule: announce, clock, push */
        s->deadline = now_ns() + 30000000000LL;
        atomic_store_explicit(&s->state, 0, memory_order_relaxed);
        atomic_store_explicit(&s->refs, 2, memory_order_relaxed);
        ck_stack_t seen, next;
        seen.generation = ck_pr_load_ptr(&lane->queue.generation);
        seen.head = ck_pr_load_ptr(&lane->queue.head);
        do {
            s->link.next = seen.head;
            next.head = &s->link;
            next.generation = (char *)((uintptr_t)seen.generation + 1);
        } while (!ck_pr_cas_ptr_2_value(&lane->queue, &seen, &next, &seen));
    }
    return NULL;
}

/* ns of wall time per churn pair's floor with `threads` threads at once. */
static double pair_ns(long n, int threads)
{
    lanes = aligned_alloc(64, sizeof *lanes * 2);
    if (lanes == NULL)
        return -1;
    memset(lanes, 0, sizeof *lanes * 2);
    per_thread = n / threads;
    double ns = wall_ns_per_item(threads, pair_range);
    free(lanes);
    return ns;
}

/* Prints how late 1 ms absolute sleeps wake over `seconds`. */
static void sleep_noise(double seconds)
{
    long long t0 = now_ns(), worst = 0, worst_at = 0;
    long sleeps = 0, over_1ms = 0, over_4ms = 0;
    while (now_ns() - t0 < (long long)(seconds * 1e9)) {
        long long due = now_ns() + 1000000;
        struct timespec ts = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        long long late = now_ns() - due;
        sleeps++;
        over_1ms += late > 1000000;
        over_4ms += late > 4000000;
        if (late > worst) {
            worst = late;
            worst_at = now_ns() - t0;
        }
    }
    printf("sleep_noise seconds=%.1f sleeps=%ld late_over_1ms=%ld late_over_4ms=%ld worst_ms=%.1f"
           " worst_at_s=%.2f\n",
           seconds, sleeps, over_1ms, over_4ms, (double)worst / 1e6, (double)worst_at / 1e9);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* us per 2 MiB of new memory as the library's pool takes it (a large page,
 * if the system gives one, populated with one call): -1 where either call
 * is refused. First, so that it gets pages no earlier test of this process
 * has used: on the VMs that give freed memory back to their host, this is
 * 0.1 ms in some hours and several ms in others (bench/README.md). */
static double large_page_us(void)
{
    const size_t large = (size_t)2 << 20, bytes = (size_t)32 << 20;
    char *raw = mmap(NULL, bytes + large, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -1;
    char *p = (char *)(((uintptr_t)raw + large - 1) & ~(uintptr_t)(large - 1));
    double us = -1;
    if (madvise(p, bytes, MADV_HUGEPAGE) == 0) {
        long long t0 = now_ns();
        if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0)
            us = (double)(now_ns() - t0) / 1e3 / (double)(bytes / large);
    }
    munmap(raw, bytes + large);
    return us;
}

/* ns per 4 KiB page: faulting in by writes; populating; writing after it. */
static void page_costs(double large_us)
{
    const size_t bytes = (size_t)56 << 20, page = 4096, pages = bytes / page;
    double per[3] = {-1, -1, -1};
    for (int populate = 0; populate < 2; populate++) {
        char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return;
        long long t0 = now_ns();
        if (populate && madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
            munmap(p, bytes);
            break; /* before Linux 5.14 */
        }
        long long t1 = now_ns();
        for (size_t off = 0; off < bytes; off += page)
            p[off] = 1;
        long long t2 = now_ns();
        if (populate) {
            per[1] = (double)(t1 - t0) / (double)pages;
            per[2] = (double)(t2 - t1) / (double)pages;
        } else {
            per[0] = (double)(t2 - t1) / (double)pages;
        }
        munmap(p, bytes);
    }
    printf("pages mib=56 fault_ns=%.0f populate_ns=%.0f touch_ns=%.0f large_populate_us=%.0f\n",
           per[0], per[1], per[2], large_us);
}

int main(int argc, char **argv)
{
    long n = 10000000;
    double sleep_s = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "n=", 2) == 0)
            n = atol(argv[i] + 2);
        else if (strncmp(argv[i], "sleep_s=", 8) == 0)
            sleep_s = atof(argv[i] + 8);
    }
    if (n < 2 || sleep_s < 0) {
        fprintf(stderr, "usage: hwt-floor [n=ITEMS >= 2] [sleep_s=SECONDS]\n");
        return 2;
    }
    double large_us = large_page_us();
    long long sink = 0, t0 = now_ns();
    for (long i = 0; i < n; i++)
        sink += now_ns();
    double clock_ns = (double)(now_ns() - t0) / (double)n;
    double tsc_ns = -1;
#if defined(__x86_64__)
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        sink += (long long)__rdtsc();
    tsc_ns = (double)(now_ns() - t0) / (double)n;
#endif

    entries = aligned_alloc(64, sizeof *entries * (size_t)(n + 1));
    if (entries == NULL)
        return 1;
    double e1 = enqueue_ns(n, 1, enqueue_range), e2 = enqueue_ns(n, 2, enqueue_range);
    double p1 = enqueue_ns(n, 1, push_range), p2 = enqueue_ns(n, 2, push_range);

    static _Atomic long counter;
    t0 = now_ns();
    for (long i = 0; i < n; i++)
        atomic_fetch_add(&counter, 1);
    double lock_ns = (double)(now_ns() - t0) / (double)n;
    free(entries);
    double pair1 = pair_ns(n, 1), pair2 = pair_ns(n, 2);
    printf("floor n=%ld clock_ns=%.1f tsc_ns=%.1f enqueue_1t_ns=%.1f enqueue_2t_ns=%.1f"
           " push_1t_ns=%.1f push_2t_ns=%.1f lock_add_ns=%.1f pair_1t_ns=%.1f pair_2t_ns=%.1f"
           " (sink %lld)\n",
           n, clock_ns, tsc_ns, e1, e2, p1, p2, lock_ns, pair1, pair2, sink & 1);
    page_costs(large_us);
    if (sleep_s > 0)
        sleep_noise(sleep_s);
    return 0;
}
