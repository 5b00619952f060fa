/*
 * alloc.c - the library's allocation functions and the test hook that makes
 * them fail. Any thread.
 */
#include "alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* Before each array: the size of its mapping, or 0 if malloc's (16 bytes,
 * so that the array keeps malloc's alignment). */
#define ARRAY_HEADER 16
/* From this size glibc's malloc maps a block itself (its default
 * M_MMAP_THRESHOLD); smaller blocks stay in its heaps, where a freed one is
 * reused, and never move that threshold up. */
#define ARRAY_MAP_FROM ((size_t)128 << 10)

void *hwt__array_alloc(hwt__alloc_site site, size_t size)
{
    if (hwt__alloc_should_fail(site) || size > SIZE_MAX / 2)
        return NULL;
    size_t total = size + ARRAY_HEADER, mapped = 0;
    char *base;
    if (total >= ARRAY_MAP_FROM) {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            return NULL;
        mapped = total;
    } else {
        base = malloc(total);
        if (base == NULL)
            return NULL;
    }
    memcpy(base, &mapped, sizeof mapped);
    return base + ARRAY_HEADER;
}

void hwt__array_free(void *p)
{
    if (p == NULL)
        return;
    char *base = (char *)p - ARRAY_HEADER;
    size_t mapped;
    memcpy(&mapped, base, sizeof mapped);
    if (mapped != 0)
        munmap(base, mapped);
    else
        free(base);
}
