/*
 * log.c - messages to the user's log callback, or to stderr (warnings and
 * errors only) when there is none. Called from whichever thread hit the
 * condition; the callback must be thread-safe.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void hwt__log(const hwt_timer *timer, hwt_log_level level, const char *fmt, ...)
{
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (timer != NULL && timer->log != NULL)
        timer->log(timer->log_ctx, level, message);
    else if (level >= HWT_LOG_WARN)
        fprintf(stderr, "hwtimer: %s: %s\n", level == HWT_LOG_WARN ? "warning" : "error", message);
}
