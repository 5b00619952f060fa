/*
 * warm-memory.c - hwt-bench-warm-memory: takes MiB of new large pages,
 * writes them and gives them back, so that the next process's new memory
 * is memory the VM still holds:
 *
 *   hwt-bench-warm-memory [MiB, default 1024]
 *   warm_memory mib=1024 ms=...
 *
 * Some VMs (virtio-balloon free page reporting, as on this Firecracker VM)
 * hand the guest's free 2 MiB blocks back to their host a few seconds after
 * they are freed; the first write to such a block then faults on the host,
 * ~20x the cost of a block the guest freed just before. Only a side that
 * takes new memory while it is timed (libhwtimer's pool) meets them:
 * Netty's heap is touched before timing, and the C peers make their timer
 * objects before timing. bench/compare, bench/compare-peers and
 * bench/interleave run this before every run of every side, so that none
 * depends on how long the VM sat idle before it (bench/README.md, "Fresh
 * pages on these VMs").
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define LARGE_PAGE ((size_t)2 << 20)

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    char *end = NULL;
    long mib = argc > 1 ? strtol(argv[1], &end, 10) : 1024;
    if (argc > 2 || (argc > 1 && (*end != '\0' || mib <= 0 || mib > (1L << 20)))) {
        fprintf(stderr, "usage: hwt-bench-warm-memory [MiB, 1 .. 1048576; default 1024]\n");
        return 2;
    }
    size_t len = (size_t)mib << 20;
    int64_t t0 = now_ns();
    char *raw = mmap(NULL, len + LARGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED) {
        perror("hwt-bench-warm-memory: mmap");
        return 1;
    }
    /* Aligned to 2 MiB, so that every block can be a large page. */
    char *p = (char *)(((uintptr_t)raw + LARGE_PAGE - 1) & ~(uintptr_t)(LARGE_PAGE - 1));
    (void)madvise(p, len, MADV_HUGEPAGE); /* not an error where THP is off */
    if (madvise(p, len, MADV_POPULATE_WRITE) != 0)
        for (size_t i = 0; i < len; i += 4096)
            p[i] = 1;
    munmap(raw, len + LARGE_PAGE);
    printf("warm_memory mib=%ld ms=%.1f\n", mib, (double)(now_ns() - t0) / 1e6);
    return 0;
}
