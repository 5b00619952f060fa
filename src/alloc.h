/*
 * alloc.h - every allocation of the library goes through here, so that tests
 * can make any allocation site fail (hwt__alloc_fail_hook) and count sites.
 * Thread-safe: the hook is read with an atomic load.
 */
#ifndef HWT_ALLOC_H
#define HWT_ALLOC_H

#include <stddef.h>

/* Allocation sites, named so that fault-injection tests can target each one. */
typedef enum {
    HWT_SITE_TIMER,        /* the hwt_timer itself */
    HWT_SITE_WHEEL,        /* bucket arrays and occupancy bitmaps */
    HWT_SITE_TIMEOUT_POOL, /* a chunk of timeouts */
    HWT_SITE_STOP_LIST,    /* the array handed back by hwt_stop */
    HWT_SITE_TASKS,        /* a block of interned (run, cancelled) pairs */
    HWT_SITE_COUNT
} hwt__alloc_site;

/* Returns nonzero to make the allocation at `site` fail. Tests only. */
typedef int (*hwt__alloc_fail_fn)(hwt__alloc_site site);
void hwt__set_alloc_fail_hook(hwt__alloc_fail_fn hook);
/* Whether the test hook fails this allocation (for allocators beside
 * these: arena.c). */
int hwt__alloc_should_fail(hwt__alloc_site site);

void *hwt__malloc(hwt__alloc_site site, size_t size);
void *hwt__calloc(hwt__alloc_site site, size_t count, size_t size);
void *hwt__aligned_alloc(hwt__alloc_site site, size_t alignment, size_t size);
void hwt__free(void *p);

#endif
