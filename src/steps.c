/*
 * steps.c - the lifecycle test hook (steps.h).
 */
#include "steps.h"

_Atomic(hwt__step_fn) hwt__step_hook;

void hwt__set_step_hook(hwt__step_fn hook)
{
    atomic_store(&hwt__step_hook, hook);
}
