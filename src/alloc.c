/*
 * alloc.c - the library's allocation functions and the test hook that makes
 * them fail. Any thread.
 */
#include "alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static _Atomic(hwt__alloc_fail_fn) fail_hook;

void hwt__set_alloc_fail_hook(hwt__alloc_fail_fn hook)
{
    atomic_store(&fail_hook, hook);
}

int hwt__alloc_should_fail(hwt__alloc_site site)
{
    hwt__alloc_fail_fn hook = atomic_load_explicit(&fail_hook, memory_order_acquire);
    return hook != NULL && hook(site);
}

void *hwt__malloc(hwt__alloc_site site, size_t size)
{
    return hwt__alloc_should_fail(site) ? NULL : malloc(size);
}

void *hwt__calloc(hwt__alloc_site site, size_t count, size_t size)
{
    return hwt__alloc_should_fail(site) ? NULL : calloc(count, size);
}

void *hwt__aligned_alloc(hwt__alloc_site site, size_t alignment, size_t size)
{
    void *p = NULL;
    if (hwt__alloc_should_fail(site) || posix_memalign(&p, alignment, size) != 0)
        return NULL;
    return p;
}

void hwt__free(void *p)
{
    free(p);
}
