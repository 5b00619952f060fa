/*
 * stopset.c - the timeouts a stop takes: filled by the worker's final drain,
 * then handed back as one array or dropped by the stopping thread (after it
 * joined the worker). Single-threaded at any moment.
 *
 * The drain appends to a growing array, so handing back 1M timeouts touches
 * each of them once. If the array cannot grow, the rest are chained through
 * their queue link instead: nothing is lost, and the hand-back retries the
 * allocation (HWT_ENOMEM keeps everything for a later stop or destroy).
 * The array is one of alloc.h's arrays, which give a large one back to the
 * system as soon as it is freed: the user frees it with
 * hwt_timeouts_release.
 */
#include <string.h>

#include "alloc.h"
#include "internal.h"

void hwt__stopset_reserve(struct hwt__stopset *set, size_t n)
{
    if (set->count != 0 || set->cap >= n || set->overflow != NULL)
        return;
    hwt_timeout **array = hwt__array_alloc(HWT_SITE_STOP_LIST, n * sizeof *array);
    if (array == NULL)
        return; /* add grows it step by step, or chains */
    hwt__array_free(set->array);
    set->array = array;
    set->cap = n;
}

void hwt__stopset_add(struct hwt__stopset *set, hwt_timeout *t)
{
    if (set->count == set->cap && set->overflow == NULL) {
        size_t cap = set->cap == 0 ? 1024 : set->cap * 2;
        hwt_timeout **grown = hwt__array_alloc(HWT_SITE_STOP_LIST, cap * sizeof *grown);
        if (grown != NULL) {
            if (set->count > 0)
                memcpy(grown, set->array, set->count * sizeof *grown);
            hwt__array_free(set->array);
            set->array = grown;
            set->cap = cap;
        }
    }
    if (set->count < set->cap && set->overflow == NULL) {
        set->array[set->count++] = t;
    } else {
        t->queue_link.next = set->overflow;
        set->overflow = &t->queue_link;
        set->overflow_count++;
    }
}

size_t hwt__stopset_size(const struct hwt__stopset *set)
{
    return set->count + set->overflow_count;
}

int hwt__stopset_take(struct hwt__stopset *set, hwt_timeout ***array, size_t *count)
{
    *array = NULL;
    *count = 0;
    size_t n = hwt__stopset_size(set);
    if (n == 0) {
        hwt__array_free(set->array);
        memset(set, 0, sizeof *set);
        return 0;
    }
    if (set->overflow != NULL) {
        hwt_timeout **all = hwt__array_alloc(HWT_SITE_STOP_LIST, n * sizeof *all);
        if (all == NULL)
            return HWT_ENOMEM;
        if (set->count > 0)
            memcpy(all, set->array, set->count * sizeof *all);
        size_t i = set->count;
        for (ck_stack_entry_t *node = set->overflow; node != NULL; node = node->next)
            all[i++] = hwt__timeout_of_queue_link(node);
        hwt__array_free(set->array);
        set->array = all;
    }
    *array = set->array;
    *count = n;
    memset(set, 0, sizeof *set);
    return 0;
}

void hwt__stopset_drop(struct hwt__stopset *set)
{
    for (size_t i = 0; i < set->count; i++) {
        hwt__run_cancelled_callback(set->array[i]);
        hwt__timeout_unref(set->array[i]);
    }
    ck_stack_entry_t *node = set->overflow;
    while (node != NULL) {
        ck_stack_entry_t *next = node->next;
        hwt_timeout *t = hwt__timeout_of_queue_link(node);
        hwt__run_cancelled_callback(t);
        hwt__timeout_unref(t);
        node = next;
    }
    hwt__array_free(set->array);
    memset(set, 0, sizeof *set);
}
