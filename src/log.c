/*
 * log.c - messages to the user's log callback, or to stderr (warnings and
 * errors only) when there is none. Called from whichever thread hit the
 * condition, never with a lock of the library held; the callback must be
 * thread-safe. The callback may call the library, which may log again on
 * the same thread (hwt_timer_destroy from a task logs an error: a callback
 * that destroys the timer on errors would call itself without end): a
 * message for a timer whose callback is already running on this thread goes
 * to stderr instead. Another timer's callback is still called (a timer
 * created in a callback warns through its own), a few levels deep.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

/* The timers whose log callbacks run on this thread, innermost last. */
#define HWT_LOG_NESTING 4
static HWT_THREAD_LOCAL const hwt_timer *callbacks_running[HWT_LOG_NESTING];
static HWT_THREAD_LOCAL unsigned callbacks_nested;

/* Whether the message may go to the timer's callback on this thread. */
static bool may_call_back(const hwt_timer *timer)
{
    if (timer == NULL || timer->log == NULL || callbacks_nested == HWT_LOG_NESTING)
        return false;
    for (unsigned i = 0; i < callbacks_nested; i++)
        if (callbacks_running[i] == timer)
            return false;
    return true;
}

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
    if (may_call_back(timer)) {
        callbacks_running[callbacks_nested++] = timer;
        timer->log(timer->log_ctx, level, message);
        callbacks_nested--;
    } else if (level >= HWT_LOG_WARN)
        fprintf(stderr, "hwtimer: %s: %s\n", level == HWT_LOG_WARN ? "warning" : "error", message);
    pthread_setcancelstate(cancel_state, &cancel_state);
}
