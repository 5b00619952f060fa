/*
 * ids.h - 32-bit names for the timeouts of a pool. The wheel links its
 * buckets' timeouts by id, not by pointer: 8 bytes of links instead of 16
 * make a timeout 48 bytes instead of 56, so a million of them touch 1/7
 * fewer new pages (on VMs each first write to a page traps to the host:
 * most of a schedule's cost there, see README "Choices").
 *
 * Each region of the pool (at most 2 MiB, 128 chunks of 340 timeouts) gets a
 * block of ids: id = block << 16 | chunk in region << 9 | timeout in chunk
 * + 1. Never 0: zeroed memory (a new wheel's buckets) holds no ids.
 * A table maps blocks to regions; a chunk's header holds its first id. The
 * table's entry is written before any timeout of the region is handed out
 * (and so before any thread can pass its id on), and never changes.
 */
#ifndef HWT_IDS_H
#define HWT_IDS_H

#include <stdbool.h>

#include "internal.h"

#define HWT_ID_NONE 0
#define HWT_ID_CHUNK_SHIFT 9  /* below: a timeout's number in its chunk, 1 .. 511 */
#define HWT_ID_BLOCK_SHIFT 16 /* below: its chunk's in the region (7 bits), and that */
#define HWT_ID_BLOCKS (UINT32_C(1) << (32 - HWT_ID_BLOCK_SHIFT))
#define HWT_ID_IN_CHUNK_MASK ((UINT32_C(1) << HWT_ID_CHUNK_SHIFT) - 1)
#define HWT_ID_CHUNK_MASK ((UINT32_C(1) << (HWT_ID_BLOCK_SHIFT - HWT_ID_CHUNK_SHIFT)) - 1)

_Static_assert(HWT_TIMEOUTS_PER_CHUNK <= HWT_ID_IN_CHUNK_MASK,
               "a chunk's timeouts are numbered 1 .. 511");
_Static_assert(HWT_MAX_REGION_BYTES / HWT_TIMEOUT_CHUNK_BYTES <= HWT_ID_CHUNK_MASK + 1,
               "a region's chunks are numbered in 7 bits");

/* 0 or HWT_ENOMEM (the table: 512 KiB, zero pages until used). */
int hwt__ids_init(struct hwt__ids *ids);
void hwt__ids_free(struct hwt__ids *ids);

/* Gives a new region (chunk-aligned, at most 2 MiB) a block of ids and
 * writes its first chunk's first id; each further chunk's is
 * hwt__ids_next_chunk of the one before. False when every block is taken
 * (HWT_ID_BLOCKS regions: over 2.8 billion timeouts). Any thread. */
bool hwt__ids_name_region(struct hwt__ids *ids, char *region);

/* The first id of the chunk after one whose first id is `first_id`. */
static inline uint32_t hwt__ids_next_chunk(uint32_t first_id)
{
    return first_id + (UINT32_C(1) << HWT_ID_CHUNK_SHIFT);
}

static inline hwt_timeout *hwt__ids_timeout(const struct hwt__ids *ids, uint32_t id)
{
    char *region =
        atomic_load_explicit(&ids->region_of_block[id >> HWT_ID_BLOCK_SHIFT], memory_order_relaxed);
    size_t chunk = (id >> HWT_ID_CHUNK_SHIFT) & HWT_ID_CHUNK_MASK;
    size_t index = (id & HWT_ID_IN_CHUNK_MASK) - 1;
    return (hwt_timeout *)(region + chunk * HWT_TIMEOUT_CHUNK_BYTES + HWT_CHUNK_HEADER_BYTES +
                           index * sizeof(hwt_timeout));
}

static inline uint32_t hwt__ids_of(const hwt_timeout *t)
{
    const struct hwt__timeout_chunk *chunk = hwt__chunk_of(t);
    size_t index = ((uintptr_t)t - (uintptr_t)chunk - HWT_CHUNK_HEADER_BYTES) / sizeof(hwt_timeout);
    return chunk->first_id + (uint32_t)index;
}

#endif
