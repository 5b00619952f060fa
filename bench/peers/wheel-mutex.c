/*
 * wheel-mutex.c - hwt-bench-wheel, the "wheel + mutex" peer: what a C server
 * writes when it wants a timing wheel and many threads - a hierarchical
 * wheel behind one pthread_mutex, with a worker thread that sleeps on a
 * condition variable until the next slot is due. Producers schedule, cancel
 * and re-arm under the mutex; the worker advances the wheel under it and runs
 * the tasks with it released.
 *
 * The wheel (the design of the Linux kernel's and of William Ahern's
 * timeout.c, written here): 11 levels of 64 slots, level l holding timeouts
 * whose expiry, in ticks, first differs from the wheel's current tick in
 * bits [6l, 6l + 6), at slot (expiry >> 6l) & 63, so any expiry in 64 bits
 * has a place and every operation is O(1) but the cascade. Advancing from
 * tick `o` to `n` empties, at each level, the slots that came due, (o >> 6l,
 * n >> 6l], and re-inserts their timeouts, which land in a lower level or on
 * the due list; a level whose coordinate did not change ends the walk. A
 * bitmap per level finds non-empty slots.
 *
 * Never early: a timeout's expiry is the first tick (counted from the
 * timer's start) that ends after its deadline, and the worker runs it once
 * floor((now - start) / tick) has reached it. Nodes are 48 bytes (links,
 * expiry, where, the task and its argument), created in advance by the user
 * (one per slot), as with a struct event or a steady_timer.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEVEL_BITS 6
#define SLOTS 64
#define LEVELS 11 /* 6 * 11 >= 64 bits of expiry */
#define BATCH 256 /* tasks taken per lock hold by the worker */

#define WHERE_NONE UINT32_MAX /* not pending */
#define WHERE_DUE (UINT32_MAX - 1)

struct link {
    struct link *next, *prev;
};

struct node {
    struct link link; /* first: a struct link * is a struct node * */
    uint64_t expires; /* tick */
    uint32_t where;   /* level * SLOTS + slot, WHERE_DUE or WHERE_NONE */
    uint32_t unused;
    void (*fn)(void *arg);
    void *arg;
};

struct wheel {
    uint64_t now; /* ticks since the timer's start that the wheel has reached */
    uint64_t pending[LEVELS];
    struct link slot[LEVELS][SLOTS];
    struct link due;
};

static void list_init(struct link *l)
{
    l->next = l->prev = l;
}

static int list_empty(const struct link *l)
{
    return l->next == l;
}

static void list_append(struct link *head, struct link *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}

static void list_unlink(struct link *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

/* Moves every element of `from` to the end of `to`; `from` ends empty. */
static void list_splice(struct link *to, struct link *from)
{
    if (list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    list_init(from);
}

static uint64_t rotl64(uint64_t x, unsigned r)
{
    r &= 63;
    return r == 0 ? x : (x << r) | (x >> (64 - r));
}

static uint64_t rotr64(uint64_t x, unsigned r)
{
    r &= 63;
    return r == 0 ? x : (x >> r) | (x << (64 - r));
}

static void wheel_init(struct wheel *w)
{
    memset(w, 0, sizeof *w);
    for (int l = 0; l < LEVELS; l++)
        for (int s = 0; s < SLOTS; s++)
            list_init(&w->slot[l][s]);
    list_init(&w->due);
}

static void wheel_insert(struct wheel *w, struct node *t)
{
    if (t->expires <= w->now) {
        list_append(&w->due, &t->link);
        t->where = WHERE_DUE;
        return;
    }
    unsigned level = (unsigned)(63 - __builtin_clzll(t->expires ^ w->now)) / LEVEL_BITS;
    unsigned s = (unsigned)(t->expires >> (level * LEVEL_BITS)) & (SLOTS - 1);
    list_append(&w->slot[level][s], &t->link);
    w->pending[level] |= UINT64_C(1) << s;
    t->where = level * SLOTS + s;
}

static void wheel_remove(struct wheel *w, struct node *t)
{
    list_unlink(&t->link);
    if (t->where != WHERE_DUE) {
        unsigned level = t->where / SLOTS, s = t->where % SLOTS;
        if (list_empty(&w->slot[level][s]))
            w->pending[level] &= ~(UINT64_C(1) << s);
    }
    t->where = WHERE_NONE;
}

/* Advances the wheel to tick `to`: what came due ends on the due list. */
static void wheel_advance(struct wheel *w, uint64_t to)
{
    if (to <= w->now)
        return;
    struct link todo;
    list_init(&todo);
    for (unsigned level = 0; level < LEVELS; level++) {
        uint64_t o = w->now >> (level * LEVEL_BITS), n = to >> (level * LEVEL_BITS);
        if (o == n)
            break; /* nor did any coordinate above */
        uint64_t span = n - o, mask;
        if (span >= SLOTS)
            mask = ~UINT64_C(0);
        else
            mask = rotl64((UINT64_C(1) << span) - 1, (unsigned)((o + 1) & (SLOTS - 1)));
        uint64_t hit = mask & w->pending[level];
        while (hit != 0) {
            unsigned s = (unsigned)__builtin_ctzll(hit);
            hit &= hit - 1;
            list_splice(&todo, &w->slot[level][s]);
            w->pending[level] &= ~(UINT64_C(1) << s);
        }
    }
    w->now = to;
    while (!list_empty(&todo)) {
        struct node *t = (struct node *)todo.next;
        list_unlink(&t->link);
        wheel_insert(w, t);
    }
}

/* The first tick at which wheel_advance has something to do (the expiry
 * itself at level 0, a cascade above); 0 if something is due now;
 * UINT64_MAX if the wheel is empty. A lower level's next slot always comes
 * before a higher level's. */
static uint64_t wheel_next(const struct wheel *w)
{
    if (!list_empty(&w->due))
        return 0;
    for (unsigned level = 0; level < LEVELS; level++) {
        if (w->pending[level] == 0)
            continue;
        uint64_t o = w->now >> (level * LEVEL_BITS);
        uint64_t r = rotr64(w->pending[level], (unsigned)((o + 1) & (SLOTS - 1)));
        uint64_t e = o + 1 + (uint64_t)__builtin_ctzll(r);
        return e << (level * LEVEL_BITS);
    }
    return UINT64_MAX;
}

/* ------------------------------------------------------------ the timer */

struct timer {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct wheel wheel;
    uint64_t wake_at; /* tick the sleeping worker waits for; 0 while it is awake */
    int stop;
    int64_t start_ns, tick_ns;
    pthread_t thread;
    struct node hour;
    struct node *nodes;
    size_t n;
};

static void noop(void *arg)
{
    (void)arg;
}

static void record(void *arg)
{
    bench_task_ran((size_t)(uintptr_t)arg);
}

static void *worker(void *p)
{
    struct timer *t = p;
    bench_worker_named();
    struct {
        void (*fn)(void *);
        void *arg;
    } batch[BATCH];
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        int64_t now = bench_now_ns();
        wheel_advance(&t->wheel, (uint64_t)((now - t->start_ns) / t->tick_ns));
        if (!list_empty(&t->wheel.due)) {
            size_t k = 0;
            while (k < BATCH && !list_empty(&t->wheel.due)) {
                struct node *e = (struct node *)t->wheel.due.next;
                wheel_remove(&t->wheel, e);
                batch[k].fn = e->fn;
                batch[k].arg = e->arg;
                k++;
            }
            pthread_mutex_unlock(&t->lock);
            for (size_t i = 0; i < k; i++)
                batch[i].fn(batch[i].arg);
            pthread_mutex_lock(&t->lock);
            continue;
        }
        uint64_t next = wheel_next(&t->wheel);
        t->wake_at = next;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&t->cond, &t->lock);
        } else {
            int64_t at = t->start_ns + (int64_t)next * t->tick_ns;
            struct timespec ts = {(time_t)(at / 1000000000), (long)(at % 1000000000)};
            pthread_cond_timedwait(&t->cond, &t->lock, &ts);
        }
        t->wake_at = 0;
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* Under the lock: schedules e at `expires`, waking the worker if it sleeps
 * past it. */
static void add_locked(struct timer *t, struct node *e, uint64_t expires)
{
    e->expires = expires;
    wheel_insert(&t->wheel, e);
    if (expires < t->wake_at) {
        t->wake_at = 0; /* one signal is enough: the worker re-plans */
        pthread_cond_signal(&t->cond);
    }
}

/* The first tick that ends at or after now + delay. */
static uint64_t expiry(const struct timer *t, int64_t delay_ns)
{
    int64_t at = bench_now_ns() + delay_ns - t->start_ns;
    return (uint64_t)((at + t->tick_ns - 1) / t->tick_ns);
}

static void *wm_create(const struct bench_config *c)
{
    struct timer *t = bench_xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_mutex_init(&t->lock, NULL) != 0 || pthread_cond_init(&t->cond, &ca) != 0)
        bench_die("pthread_mutex_init / pthread_cond_init");
    pthread_condattr_destroy(&ca);
    wheel_init(&t->wheel);
    t->tick_ns = c->tick_us * 1000;
    t->start_ns = bench_now_ns();
    t->hour.fn = noop;
    t->hour.where = WHERE_NONE;
    pthread_mutex_lock(&t->lock);
    add_locked(t, &t->hour, expiry(t, INT64_C(3600000000000)));
    pthread_mutex_unlock(&t->lock);
    if (pthread_create(&t->thread, NULL, worker, t) != 0)
        bench_die("pthread_create");
    bench_note(" levels=%d slots=%d node_bytes=%zu", LEVELS, SLOTS, sizeof(struct node));
    return t;
}

static void wm_slots(void *p, size_t n, enum bench_task task)
{
    struct timer *t = p;
    t->nodes = bench_xmalloc(n * sizeof *t->nodes);
    t->n = n;
    for (size_t i = 0; i < n; i++) {
        t->nodes[i] = (struct node){.where = WHERE_NONE,
                                    .fn = task == BENCH_RECORD ? record : noop,
                                    .arg = (void *)(uintptr_t)i};
    }
}

static void wm_arm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    uint64_t expires = expiry(t, delay_ns);
    pthread_mutex_lock(&t->lock);
    add_locked(t, &t->nodes[i], expires);
    pthread_mutex_unlock(&t->lock);
}

static int wm_cancel(void *p, size_t i)
{
    struct timer *t = p;
    struct node *e = &t->nodes[i];
    pthread_mutex_lock(&t->lock);
    int pending = e->where != WHERE_NONE;
    if (pending)
        wheel_remove(&t->wheel, e);
    pthread_mutex_unlock(&t->lock);
    return pending;
}

static int wm_rearm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    struct node *e = &t->nodes[i];
    uint64_t expires = expiry(t, delay_ns);
    pthread_mutex_lock(&t->lock);
    int pending = e->where != WHERE_NONE;
    if (pending)
        wheel_remove(&t->wheel, e);
    add_locked(t, e, expires);
    pthread_mutex_unlock(&t->lock);
    return pending;
}

static void wm_destroy(void *p)
{
    struct timer *t = p;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->cond);
    free(t->nodes);
    free(t);
}

static const char *wm_version(void)
{
    return "version=bench/peers/wheel-mutex.c";
}

static struct bench_peer wheel_mutex = {
    .name = "wheel+mutex",
    .version = wm_version,
    .create = wm_create,
    .slots = wm_slots,
    .arm = wm_arm,
    .cancel = wm_cancel,
    .rearm = wm_rearm,
    .destroy = wm_destroy,
};

int main(int argc, char **argv)
{
    return bench_main(&wheel_mutex, argc, argv);
}
