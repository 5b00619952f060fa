/*
 * alloc.c - the library's allocation functions and the test hook that makes
 * them fail. Any thread.
 */
#include "alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "os.h"

static _Atomic(hwt__alloc_fail_fn) fail_hook;

void hwt__set_alloc_fail_hook(hwt__alloc_fail_fn hook)
{
    atomic_store(&fail_hook, hook);
}

static int should_fail(hwt__alloc_site site)
{
    hwt__alloc_fail_fn hook = atomic_load_explicit(&fail_hook, memory_order_acquire);
    return hook != NULL && hook(site);
}

void *hwt__malloc(hwt__alloc_site site, size_t size)
{
    return should_fail(site) ? NULL : malloc(size);
}

void *hwt__calloc(hwt__alloc_site site, size_t count, size_t size)
{
    return should_fail(site) ? NULL : calloc(count, size);
}

void *hwt__aligned_alloc(hwt__alloc_site site, size_t alignment, size_t size)
{
    void *p = NULL;
    if (should_fail(site) || posix_memalign(&p, alignment, size) != 0)
        return NULL;
    return p;
}

void hwt__free(void *p)
{
    free(p);
}

void *hwt__map_aligned(hwt__alloc_site site, size_t size, size_t alignment)
{
    if (should_fail(site))
        return NULL;
    size_t span = size + alignment;
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (p + size < raw + span)
        munmap(p + size, (size_t)(raw + span - (p + size)));
    if (alignment >= HWT_OS_LARGE_PAGE_BYTES)
        hwt__os_prefer_large_pages(p, size);
    /* The pool hands out every page of a region soon: fault them in with one
     * call instead of a trap per 4 KiB page, which costs several us in some
     * VMs - most of a schedule's cost there.
     * Best effort: where the system cannot, pages fault on first touch. */
    hwt__os_populate(p, size);
    return p;
}

void hwt__unmap(void *p, size_t size)
{
    munmap(p, size);
}
