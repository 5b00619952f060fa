/*
 * tasks.c - interned (run, cancelled) pairs, so that a timeout stores one
 * function pointer: its run function, or - when it has a cancelled callback
 * (HWT_TO_PAIR) - a pointer to the pair. A program has few distinct pairs;
 * each timer keeps its own, append-only, until its memory is freed.
 *
 * Any thread: readers walk the blocks without a lock (a block's count is
 * published with release after its slot is written); additions take the
 * timer's tasks_lock. Each thread remembers the last pair it used (by timer
 * id: ids start at 1 and are never reused).
 */
#include <string.h>

#include "alloc.h"
#include "internal.h"

struct pair_cache {
    uint64_t timer_id; /* not the address: a freed timer's may be reused */
    const struct hwt__task_pair *pair;
};

static HWT_THREAD_LOCAL struct pair_cache last;

static const struct hwt__task_pair *find(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled)
{
    for (struct hwt__pair_block *b = atomic_load_explicit(&timer->tasks, memory_order_acquire);
         b != NULL; b = b->next) {
        unsigned n = atomic_load_explicit(&b->count, memory_order_acquire);
        for (unsigned i = 0; i < n; i++)
            if (b->pairs[i].run == run && b->pairs[i].cancelled == cancelled)
                return &b->pairs[i];
    }
    return NULL;
}

const struct hwt__task_pair *hwt__task_pair(hwt_timer *timer, hwt_task_fn run,
                                            hwt_task_fn cancelled)
{
    if (last.timer_id == timer->id && last.pair->run == run && last.pair->cancelled == cancelled)
        return last.pair;
    const struct hwt__task_pair *pair = find(timer, run, cancelled);
    if (pair == NULL) {
        pthread_mutex_lock(&timer->tasks_lock);
        pair = find(timer, run, cancelled);
        if (pair == NULL) {
            struct hwt__pair_block *b = atomic_load(&timer->tasks);
            if (b == NULL || b->count == HWT_PAIRS_PER_BLOCK) {
                struct hwt__pair_block *nb = hwt__calloc(HWT_SITE_TASKS, 1, sizeof *nb);
                if (nb != NULL) {
                    nb->next = b;
                    atomic_store_explicit(&timer->tasks, nb, memory_order_release);
                }
                b = nb;
            }
            if (b != NULL) {
                unsigned i = b->count;
                b->pairs[i].run = run;
                b->pairs[i].cancelled = cancelled;
                atomic_store_explicit(&b->count, i + 1, memory_order_release);
                pair = &b->pairs[i];
            }
        }
        pthread_mutex_unlock(&timer->tasks_lock);
        if (pair == NULL)
            return NULL;
    }
    last.timer_id = timer->id;
    last.pair = pair;
    return pair;
}

void hwt__task_pairs_free(hwt_timer *timer)
{
    struct hwt__pair_block *b = atomic_load(&timer->tasks);
    while (b != NULL) {
        struct hwt__pair_block *next = b->next;
        hwt__free(b);
        b = next;
    }
}
