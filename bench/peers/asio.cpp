/*
 * asio.cpp - hwt-bench-asio, Boost.Asio's timers as its documentation has
 * them for threads: one io_context run by one thread (kept running by a
 * work guard; concurrency hint 1, its documented hint for one running
 * thread), and producers calling expires_after + async_wait on distinct
 * steady_timer objects from their own threads ("distinct objects: safe";
 * the reactor's timer queue takes its own lock). The timers are created in
 * advance, one per slot, as a connection object owns its timer.
 *
 * Cancelling is steady_timer::cancel(); re-arming is expires_after, which
 * cancels the pending wait itself, then async_wait. A cancelled wait's
 * handler still runs, on the io_context's thread, with operation_aborted:
 * that is the work a cancel leaves to the worker, and settled() waits for
 * every one of them.
 *
 * A wait that has completed but whose handler has not run yet cannot be
 * cancelled: expires_after returns 0 and the handler still runs, with
 * success, after the re-arm. An Asio server tells such a stale completion
 * from its timer's current wait in the handler (Asio's own timeout examples
 * compare the timer's expiry with now; with other threads re-arming, a
 * generation is what can be read safely): each wait's handler carries its
 * slot's arm count, and a handler whose count is no longer the slot's is
 * not counted as a run. Without that, touch_early counted those runs as
 * early (a bound from two re-arms later), which is the harness's mistake,
 * not Asio's.
 */
#include "harness.h"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/version.hpp>
#include <boost/version.hpp>
#include <chrono>
#include <memory>
#include <cstdio>
#include <thread>
#include <vector>

namespace asio = boost::asio;

namespace
{

struct timer {
    asio::io_context ioc{1};
    asio::executor_work_guard<asio::io_context::executor_type> guard{ioc.get_executor()};
    asio::steady_timer hour{ioc};
    std::vector<asio::steady_timer> timers;
    std::unique_ptr<std::atomic<uint32_t>[]> arms; /* per slot: waits started */
    bench_task task = BENCH_NOOP;
    std::atomic<uint64_t> aborted{0}; /* written by the io_context's thread only */
    std::thread worker;
};

/* Small and trivially copyable, so Asio's handler allocator recycles its
 * memory. */
struct handler {
    timer *t;
    size_t i;
    uint32_t arm; /* the slot's arm count when this wait started */
    void operator()(const boost::system::error_code &ec) const
    {
        if (ec)
            t->aborted.store(t->aborted.load(std::memory_order_relaxed) + 1,
                             std::memory_order_release);
        else if (t->task == BENCH_RECORD &&
                 t->arms[i].load(std::memory_order_acquire) == arm) /* not stale */
            bench_task_ran(i);
    }
};

/* Starts slot i's wait, its handler tagged with the slot's new arm count
 * (the producer that owns the slot is its only writer). */
void start_wait(timer *t, size_t i)
{
    uint32_t arm = t->arms[i].load(std::memory_order_relaxed) + 1;
    t->arms[i].store(arm, std::memory_order_release);
    t->timers[i].async_wait(handler{t, i, arm});
}

void hour_done(const boost::system::error_code &)
{
}

void *as_create(const bench_config *)
{
    timer *t = new timer;
    t->hour.expires_after(std::chrono::hours(1));
    t->hour.async_wait(hour_done);
    t->worker = std::thread([t] {
        bench_worker_named();
        t->ioc.run();
    });
    return t;
}

void as_slots(void *p, size_t n, bench_task task)
{
    timer *t = static_cast<timer *>(p);
    t->task = task;
    t->timers.reserve(n);
    t->arms.reset(new std::atomic<uint32_t>[n]());
    for (size_t i = 0; i < n; i++)
        t->timers.emplace_back(t->ioc);
}

void as_arm(void *p, size_t i, int64_t delay_ns)
{
    timer *t = static_cast<timer *>(p);
    asio::steady_timer &tm = t->timers[i];
    tm.expires_after(std::chrono::nanoseconds(delay_ns));
    start_wait(t, i);
}

int as_cancel(void *p, size_t i)
{
    timer *t = static_cast<timer *>(p);
    return t->timers[i].cancel() > 0;
}

int as_rearm(void *p, size_t i, int64_t delay_ns)
{
    timer *t = static_cast<timer *>(p);
    asio::steady_timer &tm = t->timers[i];
    size_t cancelled = tm.expires_after(std::chrono::nanoseconds(delay_ns));
    start_wait(t, i);
    return cancelled > 0;
}

int as_settled(void *p, uint64_t cancels)
{
    timer *t = static_cast<timer *>(p);
    return t->aborted.load(std::memory_order_acquire) >= cancels;
}

void as_destroy(void *p)
{
    timer *t = static_cast<timer *>(p);
    t->guard.reset();
    t->ioc.stop();
    t->worker.join();
    delete t; /* the pending waits' handlers are destroyed, not run */
}

const char *as_version()
{
    static char v[80];
    std::snprintf(v, sizeof v, "version=%d.%d.%d boost=%d.%d.%d", BOOST_ASIO_VERSION / 100000,
                  BOOST_ASIO_VERSION / 100 % 1000, BOOST_ASIO_VERSION % 100, BOOST_VERSION / 100000,
                  BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
    return v;
}

} // namespace

int main(int argc, char **argv)
{
    bench_peer peer{};
    peer.name = "asio";
    peer.version = as_version;
    peer.create = as_create;
    peer.slots = as_slots;
    peer.arm = as_arm;
    peer.cancel = as_cancel;
    peer.rearm = as_rearm;
    peer.settled = as_settled;
    peer.destroy = as_destroy;
    return bench_main(&peer, argc, argv);
}
