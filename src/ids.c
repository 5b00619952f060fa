/*
 * ids.c - the pool's block table (see ids.h). Any thread.
 */
#include "ids.h"

#include "alloc.h"

int hwt__ids_init(struct hwt__ids *ids)
{
    ids->region_of_block = hwt__calloc(HWT_SITE_TIMEOUT_POOL, HWT_ID_BLOCKS, sizeof(char *));
    atomic_init(&ids->blocks, 0);
    return ids->region_of_block != NULL ? 0 : HWT_ENOMEM;
}

void hwt__ids_free(struct hwt__ids *ids)
{
    hwt__free((void *)ids->region_of_block);
    ids->region_of_block = NULL;
}

bool hwt__ids_name_region(struct hwt__ids *ids, char *region)
{
    uint32_t block = atomic_load_explicit(&ids->blocks, memory_order_relaxed);
    do {
        if (block >= HWT_ID_BLOCKS)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&ids->blocks, &block, block + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    atomic_store_explicit(&ids->region_of_block[block], region, memory_order_relaxed);
    ((struct hwt__timeout_chunk *)region)->first_id = (block << HWT_ID_BLOCK_SHIFT) + 1;
    return true;
}
