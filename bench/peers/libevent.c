/*
 * libevent.c - hwt-bench-libevent, libevent 2.1 used as its documentation
 * says for threads: evthread_use_pthreads() before the base is made (the
 * base gets a lock and a notification fd), one thread runs the loop
 * (event_base_loop with EVLOOP_NO_EXIT_ON_EMPTY), and any thread calls
 * evtimer_add / evtimer_del, which take the base's lock and wake the loop
 * when the earliest deadline changes. The events are created in advance,
 * one per slot, with event_assign into one array of
 * event_get_struct_event_size() bytes each - libevent's way to embed events
 * in one's own structures.
 *
 * precise=1 makes the base with libevent's two flags for exact deadlines
 * (the name on the line becomes "libevent-precise"):
 * EVENT_BASE_FLAG_PRECISE_TIMER (deadlines from CLOCK_MONOTONIC instead of
 * CLOCK_MONOTONIC_COARSE, and the loop waits with a timerfd instead of
 * epoll_wait's millisecond timeout) and EVENT_BASE_FLAG_NO_CACHE_TIME.
 * Without the first, a deadline may be computed from a clock up to a jiffy
 * behind; without the second, evtimer_add from another thread while the
 * loop runs callbacks computes it from the time the loop cached before
 * them (the whole batch's age behind: 7 ms early seen here with 1M timeouts
 * due over 2 s). Either way timeouts run early; the expire workload counts
 * them. cache=1 keeps the cache with precise=1 (PRECISE_TIMER alone).
 *
 * common=1 (default) re-arms churn's 30 s timeouts through a common timeout
 * (event_base_init_common_timeout), which libevent recommends for many
 * timeouts of one duration: a queue per duration instead of the heap.
 * Re-arming is evtimer_add on the pending event (libevent replaces its
 * timeout), one call.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct timer {
    struct event_base *base;
    struct event *hour;
    const struct timeval *common30; /* churn's 30 s as a common timeout, or NULL */
    unsigned char *events;
    size_t event_size, n;
    enum bench_task task;
    pthread_t thread;
};

static int precise;
static int cache = -1; /* -1: the default of the configuration (kept unless precise=1) */
static int common = 1;

static struct bench_peer libevent_peer;

static int le_key(const char *k, const char *v)
{
    if (strcmp(k, "precise") == 0 || strcmp(k, "common") == 0 || strcmp(k, "cache") == 0) {
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            bench_die("%s must be 0 or 1", k);
        if (k[0] == 'p') {
            precise = v[0] == '1';
            libevent_peer.name = precise ? "libevent-precise" : "libevent";
        } else if (k[0] == 'c' && k[1] == 'o') {
            common = v[0] == '1';
        } else {
            cache = v[0] == '1';
        }
        return 1;
    }
    return 0;
}

static struct event *ev_at(struct timer *t, size_t i)
{
    return (struct event *)(t->events + i * t->event_size);
}

static void noop_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static void record_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench_task_ran((size_t)(uintptr_t)arg);
}

static void *loop(void *p)
{
    struct timer *t = p;
    bench_worker_named();
    if (event_base_loop(t->base, EVLOOP_NO_EXIT_ON_EMPTY) < 0)
        bench_die("event_base_loop failed");
    return NULL;
}

static struct timeval tv_of(int64_t ns)
{
    int64_t us = (ns + 999) / 1000; /* libevent counts microseconds: round up */
    return (struct timeval){(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
}

static void *le_create(const struct bench_config *c)
{
    (void)c;
    if (evthread_use_pthreads() != 0)
        bench_die("evthread_use_pthreads failed");
    struct timer *t = bench_xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    struct event_config *cfg = event_config_new();
    if (cfg == NULL)
        bench_die("event_config_new failed");
    if (cache < 0)
        cache = !precise;
    if (precise)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    if (!cache)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
    t->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (t->base == NULL)
        bench_die("event_base_new_with_config failed");
    if (common) {
        struct timeval d30 = {30, 0};
        t->common30 = event_base_init_common_timeout(t->base, &d30);
        if (t->common30 == NULL)
            bench_die("event_base_init_common_timeout failed");
    }
    t->hour = evtimer_new(t->base, noop_cb, NULL);
    struct timeval hour = {3600, 0};
    if (t->hour == NULL || evtimer_add(t->hour, &hour) != 0)
        bench_die("evtimer_new / evtimer_add (1 hour) failed");
    t->event_size = event_get_struct_event_size();
    if (pthread_create(&t->thread, NULL, loop, t) != 0)
        bench_die("pthread_create");
    bench_note(" backend=%s precise=%d cache=%d common=%d", event_base_get_method(t->base), precise,
               cache, common);
    return t;
}

static void le_slots(void *p, size_t n, enum bench_task task)
{
    struct timer *t = p;
    t->events = bench_xmalloc(n * t->event_size);
    t->n = n;
    t->task = task;
    for (size_t i = 0; i < n; i++)
        if (event_assign(ev_at(t, i), t->base, -1, 0, task == BENCH_RECORD ? record_cb : noop_cb,
                         (void *)(uintptr_t)i) != 0)
            bench_die("event_assign failed");
}

static void le_arm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    struct timeval tv = tv_of(delay_ns);
    if (evtimer_add(ev_at(t, i), &tv) != 0)
        bench_die("evtimer_add failed");
}

/* evtimer_del does not say whether the event was pending: 1 on success. */
static int le_cancel(void *p, size_t i)
{
    struct timer *t = p;
    return evtimer_del(ev_at(t, i)) == 0;
}

static int le_rearm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    struct timeval tv = tv_of(delay_ns);
    const struct timeval *when = &tv;
    if (t->common30 != NULL && tv.tv_sec == 30 && tv.tv_usec == 0)
        when = t->common30;
    if (evtimer_add(ev_at(t, i), when) != 0)
        bench_die("evtimer_add failed");
    return 0;
}

static void le_destroy(void *p)
{
    struct timer *t = p;
    if (event_base_loopbreak(t->base) != 0)
        bench_die("event_base_loopbreak failed");
    pthread_join(t->thread, NULL);
    for (size_t i = 0; i < t->n; i++)
        event_del(ev_at(t, i));
    event_free(t->hour);
    event_base_free(t->base);
    free(t->events);
    free(t);
}

static const char *le_version(void)
{
    static char v[80];
    snprintf(v, sizeof v, "version=%s", event_get_version());
    return v;
}

static struct bench_peer libevent_peer = {
    .name = "libevent",
    .version = le_version,
    .key = le_key,
    .create = le_create,
    .slots = le_slots,
    .arm = le_arm,
    .cancel = le_cancel,
    .rearm = le_rearm,
    .destroy = le_destroy,
};

int main(int argc, char **argv)
{
    return bench_main(&libevent_peer, argc, argv);
}
