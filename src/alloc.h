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
    HWT_SITE_TIMER,         /* the hwt_timer itself */
    HWT_SITE_WHEEL,         /* bucket arrays and occupancy bitmaps */
    HWT_SITE_TIMEOUT_POOL,  /* a chunk of timeouts */
    HWT_SITE_STOP_LIST,     /* the array handed back by hwt_stop */
    HWT_SITE_TASKS,         /* a block of interned (run, cancelled) pairs */
    HWT_SITE_THREAD_CACHES, /* a thread's timeout caches, at its first schedule */
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

/* For arrays that can be large and live briefly (a stop's list of the
 * pending timeouts, 8 bytes each), 16-aligned. A large one is a mapping of
 * its own, so that freeing it gives it back to the system at once: glibc's
 * malloc maps the first such block, but once that is freed it serves every
 * later one of that size from a thread's heap and keeps it there after
 * free, so a server would keep a stop's worth of memory per stop thread
 * for good. Free with hwt__array_free (NULL does nothing). */
void *hwt__array_alloc(hwt__alloc_site site, size_t size);
void hwt__array_free(void *p);

#endif
