/*
 * log.c - messages to the user's log callback, or to stderr (warnings and
 * errors only) when there is none. Called from whichever thread hit the
 * condition, never with a lock of the library held; the callback must be
 * thread-safe.
 */
#include <pthread.h>
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
    /* The callback (or stderr) may write, a cancellation point: a thread
     * cancelled in the library's calls must leave them whole. */
    int cancel_state;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
    if (timer != NULL && timer->log != NULL)
        timer->log(timer->log_ctx, level, message);
    else if (level >= HWT_LOG_WARN)
        fprintf(stderr, "hwtimer: %s: %s\n", level == HWT_LOG_WARN ? "warning" : "error", message);
    pthread_setcancelstate(cancel_state, &cancel_state);
}
