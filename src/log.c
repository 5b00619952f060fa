/*
 * log.c - messages to the user's log callback, or to stderr (warnings and
 * errors only) when there is none. Called from whichever thread hit the
 * condition, never with a lock of the library held; the callback must be
 * thread-safe. The callback may call the library, which may log again on
 * the same thread (hwt_timer_destroy from a task logs an error: a callback
 * that destroys the timer on errors would call itself without end); such a
 * message goes to stderr instead.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

/* Whether this thread is inside a log callback. */
static HWT_THREAD_LOCAL bool in_log_callback;

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
    if (timer != NULL && timer->log != NULL && !in_log_callback) {
        in_log_callback = true;
        timer->log(timer->log_ctx, level, message);
        in_log_callback = false;
    } else if (level >= HWT_LOG_WARN)
        fprintf(stderr, "hwtimer: %s: %s\n", level == HWT_LOG_WARN ? "warning" : "error", message);
    pthread_setcancelstate(cancel_state, &cancel_state);
}
