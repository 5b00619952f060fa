/*
 * HwtBench.java - the Netty side of the side-by-side benchmark: the same
 * workloads as bench/hwt-bench.c, on io.netty.util.HashedWheelTimer.
 *
 *   javac -cp /usr/share/java/netty-common.jar -d OUT bench/netty/HwtBench.java
 *   java -cp OUT:/usr/share/java/netty-common.jar HwtBench WORKLOAD [key=value ...]
 *   java -cp ... HwtBench version
 *
 * Prints exactly one line on stdout, "netty WORKLOAD key=value ...", with
 * the same keys as hwt-bench (see the top of hwt-bench.c for the workloads
 * and keys). Differences, all forced by the JVM or by Netty:
 *   - Before the measured run, the same workload runs once on a separate
 *     timer with a smaller n (key warmup=N, default max(n/10, 10000) capped
 *     at n; warmup=0 skips it) and shorter waits, and is discarded: JIT
 *     warm-up. Its line goes to stderr, prefixed with "# warm-up:".
 *   - precision uses a 1 ms tick by default (Netty's minimum) instead of
 *     100 us.
 *   - memory reports heap bytes used after System.gc() (several calls), per
 *     pending timeout (bytes_per_timeout), and the process RSS delta as well
 *     (rss_bytes_per_timeout: heap growth; about 0 with -XX:+AlwaysPreTouch).
 *   - cpu_ns_per_op (the process's CPU time, every thread, from the timed
 *     phase until the worker is done, per operation; see hwt-bench.c): the
 *     JVM offers the process's CPU time only in clock ticks (10 ms), so it
 *     is summed per thread, in nanoseconds, from /proc/self/task/TID/schedstat,
 *     with the phase threads' own CPU clocks read as they finish (they exit
 *     before the end). If a thread that was there at the start has gone
 *     without saying (a JIT compiler thread the JVM retired), its time is
 *     lost: the figure then falls back to the 10 ms clock, cpu_method=times
 *     on the line (else cpu_method=schedstat). "Done" is read from the
 *     timer's own queues (new and cancelled timeouts, by reflection): both
 *     empty, and for cancel pendingTimeouts() <= 1. Netty's worker wakes
 *     every tick, so a quiet worker cannot be the sign, as it is for
 *     hwt-bench and the peers.
 *   - worker CPU comes from ThreadMXBean.getThreadCpuTime of the worker
 *     thread (recorded by the ThreadFactory); wakeups are the worker's
 *     voluntary context switches from /proc (Netty keeps no such counter),
 *     the thread found by its name "netty-bench" in /proc/self/task/ + /comm.
 */
import io.netty.util.HashedWheelTimer;
import io.netty.util.Timeout;
import io.netty.util.TimerTask;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.ref.Reference;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.stream.Stream;

public final class HwtBench {
    static final String WORKER_NAME = "netty-bench";
    static final long MS_NS = 1_000_000L;
    static final long S_NS = 1_000_000_000L;

    /* ------------------------------------------------------ configuration */

    static final class Config implements Cloneable {
        String workload;
        long n = -1, threads = 2, tickUs = -1, wheel = 512, spanMs = -1, settleMs = -1,
             waitMs = 200, ring = 1000, seed = 42, warmup = -1;
        double seconds = 5.0;
        String dump;

        Config copy() {
            try {
                return (Config) clone();
            } catch (CloneNotSupportedException e) {
                throw new AssertionError(e);
            }
        }
    }

    static void die(String msg) {
        System.err.println("HwtBench: " + msg);
        System.exit(1);
    }

    static long parseLong(String k, String v, long min) {
        try {
            long x = Long.parseLong(v);
            if (x >= min) {
                return x;
            }
        } catch (NumberFormatException e) {
            // fall through
        }
        die("bad value for " + k + ": '" + v + "' (an integer >= " + min + ")");
        return 0;
    }

    static Config parse(String[] args) {
        Config c = new Config();
        c.workload = args[0];
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq < 0) {
                die("expected key=value, got '" + args[i] + "'");
            }
            String k = args[i].substring(0, eq), v = args[i].substring(eq + 1);
            switch (k) {
                case "n": c.n = parseLong(k, v, 1); break;
                case "threads": c.threads = parseLong(k, v, 1); break;
                case "tick_us": c.tickUs = parseLong(k, v, 1); break;
                case "wheel": c.wheel = parseLong(k, v, 1); break;
                case "span_ms": c.spanMs = parseLong(k, v, 1); break;
                case "settle_ms": c.settleMs = parseLong(k, v, 0); break;
                case "wait_ms": c.waitMs = parseLong(k, v, 0); break;
                case "ring": c.ring = parseLong(k, v, 1); break;
                case "seed": c.seed = parseLong(k, v, 0); break;
                case "warmup": c.warmup = parseLong(k, v, 0); break;
                case "dump": c.dump = v; break;
                case "seconds":
                    try {
                        c.seconds = Double.parseDouble(v);
                    } catch (NumberFormatException e) {
                        c.seconds = -1;
                    }
                    if (!(c.seconds > 0) || c.seconds > 86400) {
                        die("bad value for seconds: '" + v + "'");
                    }
                    break;
                default: die("unknown key '" + k + "'");
            }
        }
        boolean precision = c.workload.equals("precision");
        if (c.n < 0) {
            c.n = precision ? 10000 : 1000000;
        }
        if (c.tickUs < 0) {
            c.tickUs = 1000; /* Netty's minimum, also for precision */
        }
        if (c.spanMs < 0) {
            c.spanMs = precision ? 1000 : 2000;
        }
        if (c.settleMs < 0) {
            c.settleMs = c.workload.equals("memory") ? 1500 : 1000;
        }
        if (c.warmup < 0) {
            c.warmup = Math.min(c.n, Math.max(c.n / 10, 10000));
        }
        if (c.n > Integer.MAX_VALUE - 8) {
            die("n too large for Java arrays");
        }
        return c;
    }

    /* ------------------------------------------------------------ helpers */

    static final StringBuilder line = new StringBuilder();

    static void put(String s) {
        line.append(s);
    }

    static String f1(double x) {
        return String.format("%.1f", x);
    }

    static void putParams(Config c) {
        put("netty " + c.workload + " n=" + c.n + " threads=" + c.threads + " tick_us=" + c.tickUs
            + " wheel=" + c.wheel);
    }

    static void sleepNs(long ns) {
        long end = System.nanoTime() + ns;
        for (long left = ns; left > 0; left = end - System.nanoTime()) {
            try {
                TimeUnit.NANOSECONDS.sleep(left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /* splitmix64, the same sequence and mapping as hwt-bench.c. */
    static long[] uniformDelays(int n, long lo, long hi, long seed) {
        long[] d = new long[n];
        long state = seed;
        long range = hi - lo;
        if (range == 0) {
            range = 1;
        }
        for (int i = 0; i < n; i++) {
            long z = (state += 0x9E3779B97F4A7C15L);
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            z = z ^ (z >>> 31);
            d[i] = lo + (z >>> 1) % range;
        }
        return d;
    }

    static long percentile(long[] sorted, double p) {
        int n = sorted.length;
        if (n == 0) {
            return 0;
        }
        double rank = p / 100.0 * n;
        long idx = (long) rank;
        if (idx < rank) {
            idx++;
        }
        idx = Math.max(1, Math.min(n, idx));
        return sorted[(int) idx - 1];
    }

    /* ------------------------------------------------- timer and worker */

    static final TimerTask NOOP = t -> { };
    static volatile Thread worker;

    static HashedWheelTimer startTimer(Config c) {
        HashedWheelTimer timer = new HashedWheelTimer(r -> {
            Thread t = new Thread(r, WORKER_NAME);
            worker = t;
            return t;
        }, c.tickUs, TimeUnit.MICROSECONDS, (int) c.wheel, false, -1);
        timer.newTimeout(NOOP, 1, TimeUnit.HOURS);
        return timer;
    }

    /* The worker's native thread id, found by name; -1 if not found. */
    static long workerTid() {
        try (Stream<Path> tasks = Files.list(Paths.get("/proc/self/task"))) {
            for (Path p : (Iterable<Path>) tasks::iterator) {
                try {
                    String comm = new String(Files.readAllBytes(p.resolve("comm"))).trim();
                    if (comm.equals(WORKER_NAME)) {
                        return Long.parseLong(p.getFileName().toString());
                    }
                } catch (IOException e) {
                    // thread gone
                }
            }
        } catch (IOException e) {
            return -1;
        }
        return -1;
    }

    /* {voluntary, involuntary} context switches of native thread tid. */
    static long[] ctxsw(long tid) {
        long[] r = {-1, -1};
        if (tid < 0) {
            return r;
        }
        try {
            List<String> lines = Files.readAllLines(Paths.get("/proc/self/task/" + tid + "/status"));
            for (String l : lines) {
                if (l.startsWith("voluntary_ctxt_switches:")) {
                    r[0] = Long.parseLong(l.substring(24).trim());
                } else if (l.startsWith("nonvoluntary_ctxt_switches:")) {
                    r[1] = Long.parseLong(l.substring(27).trim());
                }
            }
        } catch (IOException e) {
            // leave -1
        }
        return r;
    }

    static long rssBytes() {
        try {
            String[] f = new String(Files.readAllBytes(Paths.get("/proc/self/statm"))).trim().split(" ");
            return Long.parseLong(f[1]) * 4096L;
        } catch (IOException e) {
            return -1;
        }
    }

    static long heapUsedAfterGc() {
        Runtime rt = Runtime.getRuntime();
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            System.gc();
            sleepNs(50 * MS_NS);
            used = Math.min(used, rt.totalMemory() - rt.freeMemory());
        }
        return used;
    }

    /* ------------------------------------------------- CPU of the process */

    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    /* Each phase thread's CPU time when it finished, by native thread id. */
    static final Map<Long, Long> finishedCpu = new ConcurrentHashMap<>();

    static long selfTid() {
        try {
            Path p = Files.readSymbolicLink(Paths.get("/proc/thread-self"));
            return Long.parseLong(p.getFileName().toString());
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
    }

    /* A phase thread's last call. */
    static void recordFinished() {
        long tid = selfTid();
        if (tid > 0) {
            finishedCpu.put(tid, THREADS.getCurrentThreadCpuTime());
        }
    }

    static final class CpuMark {
        final Map<Long, Long> live = new HashMap<>();
        final Map<Long, Long> finished = new HashMap<>(finishedCpu);
        long coarse;
        long waited; /* CPU the main thread spent waiting for the worker: not counted */
        final long uncounted = uncountedCpu.get(); /* spent at start lines: not counted */
    }

    /* Every live thread's CPU time (ns, from schedstat), and the process's in
     * clock ticks. */
    static CpuMark cpuMark() {
        CpuMark m = new CpuMark();
        try (Stream<Path> tasks = Files.list(Paths.get("/proc/self/task"))) {
            for (Path p : (Iterable<Path>) tasks::iterator) {
                try {
                    String st = new String(Files.readAllBytes(p.resolve("schedstat"))).trim();
                    m.live.put(Long.parseLong(p.getFileName().toString()),
                               Long.parseLong(st.substring(0, st.indexOf(' '))));
                } catch (IOException | RuntimeException e) {
                    // thread gone
                }
            }
        } catch (IOException e) {
            // leave it empty: the coarse figure is used
        }
        m.coarse = ((com.sun.management.OperatingSystemMXBean) ManagementFactory
                        .getOperatingSystemMXBean()).getProcessCpuTime();
        return m;
    }

    static String cpuMethod = "schedstat";

    /* CPU time of the process between two marks, every thread. */
    static long cpuBetween(CpuMark a, CpuMark b) {
        Set<Long> all = new HashSet<>(b.live.keySet());
        all.addAll(b.finished.keySet());
        long sum = 0;
        for (long tid : all) {
            long end = b.finished.containsKey(tid) ? b.finished.get(tid) : b.live.get(tid);
            long start = a.finished.containsKey(tid) ? a.finished.get(tid)
                                                     : a.live.getOrDefault(tid, 0L);
            sum += end - start;
        }
        sum -= b.waited - a.waited + b.uncounted - a.uncounted;
        for (long tid : a.live.keySet()) {
            if (!b.live.containsKey(tid) && !b.finished.containsKey(tid)) {
                cpuMethod = "times";
                return b.coarse - a.coarse - (b.waited - a.waited) - (b.uncounted - a.uncounted);
            }
        }
        return sum;
    }

    /* The timer's queues of new and of cancelled timeouts (private fields). */
    static Queue<?> queue(HashedWheelTimer timer, String name) {
        try {
            Field f = HashedWheelTimer.class.getDeclaredField(name);
            f.setAccessible(true);
            return (Queue<?>) f.get(timer);
        } catch (ReflectiveOperationException | RuntimeException e) {
            die("cannot read HashedWheelTimer." + name + ": " + e);
            return null;
        }
    }

    interface Done {
        boolean done();
    }

    /* Waits until the worker has moved every new timeout and unlinked every
     * cancelled one (and `extra` holds); returns the mark taken then, and
     * when, in at[0]. */
    static CpuMark settle(HashedWheelTimer timer, Done extra, long[] at, long waitedBefore) {
        Queue<?> added = queue(timer, "timeouts"), cancelled = queue(timer, "cancelledTimeouts");
        long deadline = System.nanoTime() + 120 * S_NS;
        long self0 = THREADS.getCurrentThreadCpuTime();
        while (!(added.isEmpty() && cancelled.isEmpty() && extra.done())) {
            if (System.nanoTime() > deadline) {
                die("the worker did not settle within 120 s");
            }
            sleepNs(MS_NS);
        }
        at[0] = System.nanoTime();
        timedExtend(at[0]); /* the CPU figures run to here */
        long waited = waitedBefore + THREADS.getCurrentThreadCpuTime() - self0;
        CpuMark m = cpuMark();
        m.waited = waited;
        return m;
    }

    static CpuMark settle(HashedWheelTimer timer, Done extra, long[] at) {
        return settle(timer, extra, at, 0);
    }

    static String cpuKeys(CpuMark a, CpuMark b, long ops, long end, long at) {
        return " cpu_ns_per_op=" + f1((double) cpuBetween(a, b) / Math.max(ops, 1))
            + String.format(" drain_ms=%.2f", (at - end) / 1e6) + " cpu_method=" + cpuMethod;
    }

    /* ------------------------------------------------------ the start line */

    /* CPU time spent at start lines, which no workload's figures count. */
    static final AtomicLong uncountedCpu = new AtomicLong();

    /* As bench/common.h's start line: the threads of a timed phase spin until
     * each has seen every other one's counter move 1000 times in a row with
     * no gap over 50 us (they run at the same time on different CPUs, not
     * in turns on one, where a barrier's wake-up can put them), then take
     * their start times; not with more threads than CPUs, and not past
     * 200 ms. */
    static final class StartLine {
        static final int STREAK = 1000, STRIDE = 8; /* 8 longs: a cache line each */
        static final long GAP_NS = 50_000, GIVE_UP_NS = 200_000_000;
        final int threads;
        final boolean needed;
        final AtomicInteger passed = new AtomicInteger();
        final AtomicLongArray beats;

        StartLine(int p) {
            threads = p;
            needed = p > 1 && p <= Runtime.getRuntime().availableProcessors();
            beats = new AtomicLongArray((p + 1) * STRIDE);
        }

        void reset() {
            passed.set(0);
        }

        void await(int self) {
            if (!needed) {
                return;
            }
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long[] seen = new long[threads], movedAt = new long[threads];
            int[] streak = new int[threads];
            long now = System.nanoTime(), giveUp = now + GIVE_UP_NS;
            for (int j = 0; j < threads; j++) {
                seen[j] = beats.get((j + 1) * STRIDE);
                movedAt[j] = now;
            }
            boolean done = false;
            while (passed.get() < threads && now < giveUp) {
                beats.incrementAndGet((self + 1) * STRIDE);
                now = System.nanoTime();
                if (done) {
                    continue;
                }
                boolean all = true;
                for (int j = 0; j < threads; j++) {
                    if (j == self) {
                        continue;
                    }
                    long v = beats.get((j + 1) * STRIDE);
                    if (v != seen[j]) {
                        streak[j] = now - movedAt[j] > GAP_NS ? 1 : streak[j] + 1;
                        seen[j] = v;
                        movedAt[j] = now;
                    }
                    all &= streak[j] >= STREAK;
                }
                if (all) {
                    done = true;
                    passed.incrementAndGet();
                }
            }
            uncountedCpu.addAndGet(THREADS.getCurrentThreadCpuTime() - cpu0);
        }
    }

    /* ----------------------------------------------------- parallel phases */

    interface Body {
        void run(int self, int threads) throws Exception;
    }

    /* P threads released together; returns wall ns (last end - first start). */
    static long runPhase(int threads, Body body) {
        CyclicBarrier barrier = new CyclicBarrier(threads);
        StartLine line = new StartLine(threads);
        long[] start = new long[threads], end = new long[threads];
        Thread[] ts = new Thread[threads];
        Throwable[] error = new Throwable[1];
        for (int i = 0; i < threads; i++) {
            final int self = i;
            ts[i] = new Thread(() -> {
                try {
                    barrier.await();
                    line.await(self);
                    start[self] = System.nanoTime();
                    body.run(self, threads);
                    end[self] = System.nanoTime();
                    recordFinished();
                } catch (Throwable e) {
                    synchronized (error) {
                        error[0] = e;
                    }
                }
            }, "bench-" + i);
            ts[i].start();
        }
        for (Thread t : ts) {
            try {
                t.join();
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        }
        if (error[0] != null) {
            error[0].printStackTrace();
            die("a phase thread failed");
        }
        return wall(start, end, threads);
    }

    /* As bench/common.h's bench_wall: last end - first start, and that span
     * becomes the run's timed window. */
    static long wall(long[] start, long[] end, int threads) {
        long first = Long.MAX_VALUE, last = Long.MIN_VALUE;
        for (int i = 0; i < threads; i++) {
            first = Math.min(first, start[i]);
            last = Math.max(last, end[i]);
        }
        timedFrom = first;
        timedTo = last;
        return last - first;
    }

    /* The run's timed window (System.nanoTime(), CLOCK_MONOTONIC on Linux;
     * timedFrom = 0: none), as bench/common.h's bench_timed: printed as
     * timed_from_ns and timed_to_ns for bench/with-steal. */
    static long timedFrom, timedTo;

    static void timedExtend(long to) {
        if (timedFrom != 0 && to > timedTo) {
            timedTo = to;
        }
    }

    /* P threads that run several phases (schedule_warm, cancel_own), so that a
     * thread's later phases work on what it scheduled itself. */
    static final class Team {
        final int threads;
        final CyclicBarrier go, done;
        final StartLine line;
        final Thread[] ts;
        final long[] start, end;
        volatile Body body;
        volatile Throwable error;

        Team(int p) {
            threads = p;
            go = new CyclicBarrier(p + 1);
            done = new CyclicBarrier(p + 1);
            line = new StartLine(p);
            ts = new Thread[p];
            start = new long[p];
            end = new long[p];
            for (int i = 0; i < p; i++) {
                final int self = i;
                ts[i] = new Thread(() -> {
                    try {
                        for (;;) {
                            go.await();
                            Body b = body;
                            if (b == null) {
                                break;
                            }
                            line.await(self);
                            start[self] = System.nanoTime();
                            b.run(self, p);
                            end[self] = System.nanoTime();
                            done.await();
                        }
                        recordFinished();
                    } catch (Throwable e) {
                        error = e;
                        go.reset();
                        done.reset();
                    }
                }, "bench-" + i);
                ts[i].start();
            }
        }

        long step(Body b) {
            body = b;
            line.reset();
            try {
                go.await();
                done.await();
            } catch (Exception e) {
                if (error != null) {
                    error.printStackTrace();
                }
                die("a team thread failed: " + e);
            }
            return wall(start, end, threads);
        }

        void stop() {
            body = null;
            try {
                go.await();
                for (Thread t : ts) {
                    t.join();
                }
            } catch (Exception e) {
                die("a team thread failed: " + e);
            }
        }
    }

    /* ---------------------------------------------------------- workloads */

    static void schedule(Config c) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        long[] delays = uniformDelays(n, 10 * S_NS, 70 * S_NS, c.seed);
        CpuMark cpu0 = cpuMark();
        long wall = runPhase(p, (self, threads) -> {
            for (int i = self; i < n; i += threads) {
                timer.newTimeout(NOOP, delays[i], TimeUnit.NANOSECONDS);
            }
        });
        long end = System.nanoTime();
        long[] at = new long[1];
        CpuMark cpu1 = settle(timer, () -> true, at);
        long t0 = System.nanoTime();
        Set<Timeout> list = timer.stop();
        long stop = System.nanoTime() - t0;
        putParams(c);
        put(" ns_per_op=" + f1((double) wall / n) + " stop_ms=" + f1(stop / 1e6) + " list="
            + list.size() + cpuKeys(cpu0, cpu1, n, end, at[0]));
    }

    /* schedule_warm: the same threads schedule n, cancel them, and the worker
     * unlinks them (untimed); then the threads schedule n again (timed). */
    static void scheduleWarm(Config c) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        long[] delays = uniformDelays(n, 10 * S_NS, 70 * S_NS, c.seed);
        Timeout[] handles = new Timeout[n];
        Team team = new Team(p);
        team.step((self, threads) -> {
            for (int i = self; i < n; i += threads) {
                handles[i] = timer.newTimeout(NOOP, delays[i], TimeUnit.NANOSECONDS);
            }
        });
        team.step((self, threads) -> {
            for (int i = self; i < n; i += threads) {
                handles[i].cancel();
                handles[i] = null;
            }
        });
        long[] at = new long[1];
        settle(timer, () -> timer.pendingTimeouts() <= 1, at);
        CpuMark cpu0 = cpuMark();
        long wall = team.step((self, threads) -> {
            for (int i = self; i < n; i += threads) {
                timer.newTimeout(NOOP, delays[i], TimeUnit.NANOSECONDS);
            }
        });
        long end = System.nanoTime();
        CpuMark cpu1 = settle(timer, () -> true, at);
        team.stop();
        long pending = timer.pendingTimeouts();
        timer.stop();
        putParams(c);
        put(" ns_per_op=" + f1((double) wall / n) + cpuKeys(cpu0, cpu1, n, end, at[0]) + " pending="
            + pending);
    }

    /* cancel: P threads schedule, P other threads cancel; cancel_own (own):
     * each of P threads cancels what it scheduled itself. */
    static void cancel(Config c, boolean own) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        Timeout[] handles = new Timeout[n];
        Body schedule = (self, threads) -> {
            for (int i = self; i < n; i += threads) {
                handles[i] = timer.newTimeout(NOOP, 10 * S_NS + (i % 60000) * MS_NS,
                                              TimeUnit.NANOSECONDS);
            }
        };
        AtomicLong ok = new AtomicLong();
        Body cancel = (self, threads) -> {
            long mine = 0;
            for (int i = self; i < n; i += threads) {
                if (handles[i].cancel()) {
                    mine++;
                }
            }
            ok.addAndGet(mine);
        };
        Team team = own ? new Team(p) : null;
        if (own) {
            team.step(schedule);
        } else {
            runPhase(p, schedule);
        }
        sleepNs(c.waitMs * MS_NS);
        CpuMark cpu0 = cpuMark();
        long wall = own ? team.step(cancel) : runPhase(p, cancel);
        long done = System.nanoTime();
        long deadline = done + 60 * S_NS;
        long self0 = THREADS.getCurrentThreadCpuTime(); /* the measurement's wait: not counted */
        while (timer.pendingTimeouts() > 1 && System.nanoTime() < deadline) {
            sleepNs(50_000);
        }
        long pendingNs = System.nanoTime() - done;
        long pending = timer.pendingTimeouts();
        long[] at = new long[1];
        CpuMark cpu1 = settle(timer, () -> timer.pendingTimeouts() <= 1, at,
                              THREADS.getCurrentThreadCpuTime() - self0);
        if (own) {
            team.stop();
        }
        timer.stop();
        putParams(c);
        put(" ns_per_op=" + f1((double) wall / n) + String.format(" pending_ms=%.2f", pendingNs / 1e6)
            + " cancelled=" + ok.get() + " pending=" + pending + cpuKeys(cpu0, cpu1, n, done, at[0]));
    }

    static void churn(Config c) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads, ring = (int) c.ring;
        Timeout[] handles = new Timeout[p * ring];
        long iters = n / p;
        AtomicLong ok = new AtomicLong();
        CpuMark cpu0 = cpuMark();
        long wall = runPhase(p, (self, threads) -> {
            long mine = 0;
            int base = self * ring;
            for (long k = 0, s = 0; k < iters; k++) {
                Timeout old = handles[base + (int) s];
                if (old != null && old.cancel()) {
                    mine++;
                }
                handles[base + (int) s] = timer.newTimeout(NOOP, 30, TimeUnit.SECONDS);
                if (++s == ring) {
                    s = 0;
                }
            }
            ok.addAndGet(mine);
        });
        long end = System.nanoTime();
        long[] at = new long[1];
        CpuMark cpu1 = settle(timer, () -> true, at);
        long pairs = iters * p;
        timer.stop();
        putParams(c);
        put(" ring=" + ring + " ns_per_op=" + f1((double) wall / Math.max(pairs, 1)) + " pairs=" + pairs
            + " cancelled=" + ok.get() + cpuKeys(cpu0, cpu1, pairs, end, at[0]));
    }

    /* Waits (10 s at most) until slot i's task has run `count` times. */
    static void awaitRuns(String workload, AtomicIntegerArray runs, int i, int count) {
        long until = System.nanoTime() + 10 * S_NS;
        while (runs.get(i) < count) {
            if (System.nanoTime() > until) {
                die(workload + ": a cancel failed but the task did not run");
            }
            Thread.yield();
        }
    }

    /* touch / touch_early: each of P threads owns a ring of `ring` timeouts,
     * scheduled 30 s ahead before the timed phase; n/P times it moves the
     * slot's deadline the only way Netty allows, cancel + newTimeout (Netty
     * has no reschedule: netty/netty#6669) - to 30 s (touch), or alternately
     * to 10 ms and 30 s (touch_early). Never early: the thread reads the
     * clock once per pass over its ring; a call's deadline is at least that
     * reading + its delay, stored per slot before the call when it moves the
     * deadline earlier, after it when later (release stores, as hwt-bench's:
     * newTimeout's queue publishes them to the worker); a task is early if
     * it runs before the lower of its slot's last two bounds (it may race
     * the next call, if its 10 ms came due during the phase). A cancel that
     * fails found that 10 ms arm expired: the thread waits until its task
     * has been counted before it writes the slot's bounds again, as
     * hwt-bench does, so that a task whose worker was preempted between
     * expiring and running it is not judged against the bounds of calls
     * made since. */
    static void touch(Config c, boolean earlyMode) {
        HashedWheelTimer timer = startTimer(c);
        int p = (int) c.threads, ring = (int) c.ring, slots = p * ring;
        long iters = c.n / p, calls = iters * p;
        AtomicLongArray lb = new AtomicLongArray(slots),
            lbPrev = new AtomicLongArray(slots),
            ranAt = new AtomicLongArray(slots);
        AtomicIntegerArray runs = new AtomicIntegerArray(slots);
        int[] failedCancels = new int[slots]; /* per slot, written by its thread */
        AtomicLong ran = new AtomicLong(), early = new AtomicLong(), cancelled = new AtomicLong();
        TimerTask[] tasks = new TimerTask[slots];
        Timeout[] handles = new Timeout[slots];
        long setup = System.nanoTime();
        for (int i = 0; i < slots; i++) {
            final int slot = i;
            tasks[i] = t -> {
                long now = System.nanoTime();
                if (now < Math.min(lb.get(slot), lbPrev.get(slot))) {
                    early.incrementAndGet();
                }
                ranAt.set(slot, now);
                ran.incrementAndGet();
                runs.incrementAndGet(slot);
            };
            lb.set(i, setup + 30 * S_NS);
            lbPrev.set(i, setup + 30 * S_NS);
            handles[i] = timer.newTimeout(tasks[i], 30, TimeUnit.SECONDS);
        }
        long[] at = new long[1];
        settle(timer, () -> true, at);
        CpuMark cpu0 = cpuMark();
        long wall = runPhase(p, (self, threads) -> {
            int base = self * ring;
            long mine = 0, t = 0;
            for (long k = 0, s = 0, pass = 0; k < iters; k++) {
                if (s == 0) {
                    t = System.nanoTime();
                }
                int i = base + (int) s;
                long d = earlyMode && ((pass + s) & 1) != 0 ? 10 * MS_NS : 30 * S_NS;
                boolean earlier = d < 30 * S_NS;
                if (earlier) {
                    lbPrev.lazySet(i, lb.get(i));
                    lb.lazySet(i, t + d);
                }
                if (handles[i].cancel()) {
                    mine++;
                } else {
                    awaitRuns(c.workload, runs, i, ++failedCancels[i]);
                }
                handles[i] = timer.newTimeout(tasks[i], d, TimeUnit.NANOSECONDS);
                if (!earlier) {
                    lbPrev.lazySet(i, lb.get(i));
                    lb.lazySet(i, t + d);
                }
                if (++s == ring) {
                    s = 0;
                    pass++;
                }
            }
            cancelled.addAndGet(mine);
        });
        long end = System.nanoTime();
        long due10 = 0, lastDue = 0;
        for (int i = 0; i < slots; i++) {
            int s = i % ring;
            if (iters > s && earlyMode && (((iters - 1 - s) / ring + s) & 1) != 0) {
                due10++;
                lastDue = Math.max(lastDue, lb.get(i));
            }
        }
        long self0 = THREADS.getCurrentThreadCpuTime(); /* the measurement's wait: not counted */
        long deadline = lastDue + 10 * S_NS;
        for (;;) {
            long missing = 0;
            for (int i = 0; i < slots; i++) {
                int s = i % ring;
                if (iters > s && earlyMode && (((iters - 1 - s) / ring + s) & 1) != 0
                    && ranAt.get(i) < lb.get(i) - 10 * MS_NS) { /* ran since its last pass began */
                    missing++;
                }
            }
            if (missing == 0) {
                break;
            }
            if (System.nanoTime() > deadline) {
                die(c.workload + ": " + missing + " of " + due10
                    + " timeouts left at 10 ms did not run within 10 s of their deadline");
            }
            sleepNs(MS_NS);
        }
        CpuMark cpu1 = settle(timer, () -> true, at, THREADS.getCurrentThreadCpuTime() - self0);
        timer.stop();
        putParams(c);
        put(" ring=" + ring + " ns_per_op=" + f1((double) wall / Math.max(calls, 1)) + " calls=" + calls
            + " ran=" + ran.get() + " left_at_10ms=" + due10 + " early=" + early.get() + " cancelled="
            + cancelled.get() + cpuKeys(cpu0, cpu1, calls, end, at[0]));
        if (early.get() > 0) { /* Netty's own behaviour: reported, as expire reports it */
            System.err.println(c.workload + ": " + early.get() + " timeouts ran before their deadline");
        }
    }

    static void expire(Config c) throws IOException {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        long[] delays = uniformDelays(n, 0, c.spanMs * MS_NS, c.seed);
        long[] schedAt = new long[n], ranAt = new long[n];
        TimerTask[] tasks = new TimerTask[n];
        AtomicInteger ran = new AtomicInteger();
        for (int i = 0; i < n; i++) {
            final int idx = i;
            tasks[i] = t -> {
                ranAt[idx] = System.nanoTime();
                ran.incrementAndGet();
            };
        }
        CpuMark cpu0 = cpuMark();
        long t0 = System.nanoTime();
        long wall = runPhase(p, (self, threads) -> {
            for (int i = self; i < n; i += threads) {
                schedAt[i] = System.nanoTime();
                timer.newTimeout(tasks[i], delays[i], TimeUnit.NANOSECONDS);
            }
        });
        long deadline = System.nanoTime() + c.spanMs * MS_NS + 60 * S_NS;
        long self0 = THREADS.getCurrentThreadCpuTime(); /* the measurement's wait: not counted */
        while (ran.get() < n) {
            if (System.nanoTime() > deadline) {
                die(c.workload + ": only " + ran.get() + " of " + n + " tasks ran");
            }
            sleepNs(MS_NS);
        }
        long[] at = new long[1];
        CpuMark cpu1 = settle(timer, () -> true, at, THREADS.getCurrentThreadCpuTime() - self0);
        timer.stop();
        long last = Long.MIN_VALUE, early = 0;
        double sum = 0;
        long[] late = new long[n];
        int worst = 0;
        for (int i = 0; i < n; i++) {
            last = Math.max(last, ranAt[i]);
            late[i] = ranAt[i] - (schedAt[i] + delays[i]);
            if (late[i] < 0) {
                early++;
            }
            if (late[i] > late[worst]) {
                worst = i;
            }
            sum += late[i];
        }
        long worstDue = schedAt[worst] + delays[worst] - t0;
        timedExtend(last);
        Arrays.sort(late);
        if (c.dump != null) {
            try (BufferedWriter w = new BufferedWriter(new FileWriter(c.dump), 1 << 16)) {
                for (long x : late) {
                    w.write(String.format("%.3f\n", x / 1e3));
                }
            }
        }
        putParams(c);
        put(" span_ms=" + c.spanMs + " total_ms=" + f1((last - t0) / 1e6) + " sched_ns_per_op="
            + f1((double) wall / n) + " p50_us=" + f1(percentile(late, 50) / 1e3) + " p90_us="
            + f1(percentile(late, 90) / 1e3) + " p99_us=" + f1(percentile(late, 99) / 1e3)
            + " p999_us=" + f1(percentile(late, 99.9) / 1e3) + " max_us=" + f1(late[n - 1] / 1e3)
            + " max_due_ms=" + f1(worstDue / 1e6) + " mean_us=" + f1(sum / n / 1e3) + " early="
            + early + " cpu_ns_per_op=" + f1((double) cpuBetween(cpu0, cpu1) / n) + " cpu_method="
            + cpuMethod);
    }

    static final class Sample {
        long at, cpuNs, vol, invol;
    }

    static Sample sample(long tid) {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Sample s = new Sample();
        s.at = System.nanoTime();
        s.cpuNs = mx.getThreadCpuTime(worker.getId());
        long[] cs = ctxsw(tid);
        s.vol = cs[0];
        s.invol = cs[1];
        return s;
    }

    static void putWorkerDelta(Sample a, Sample b) {
        long vol = a.vol < 0 || b.vol < 0 ? -1 : b.vol - a.vol;
        long invol = a.invol < 0 || b.invol < 0 ? -1 : b.invol - a.invol;
        put(String.format(" window_s=%.2f cpu_ms=%.3f wakeups=%d vcsw=%d ivcsw=%d worker_cpu_total_ms=%.3f",
                          (b.at - a.at) / 1e9, (b.cpuNs - a.cpuNs) / 1e6, vol, vol, invol, b.cpuNs / 1e6));
    }

    static void idle(Config c) {
        HashedWheelTimer timer = startTimer(c);
        sleepNs(50 * MS_NS);
        long tid = workerTid();
        Sample a = sample(tid);
        sleepNs((long) (c.seconds * 1e9));
        Sample b = sample(tid);
        timer.stop();
        putParams(c);
        putWorkerDelta(a, b);
    }

    static void hold(Config c) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        long[] delays = uniformDelays(n, 10 * S_NS, 70 * S_NS, c.seed);
        long wall = runPhase(p, (self, threads) -> {
            for (int i = self; i < n; i += threads) {
                timer.newTimeout(NOOP, delays[i], TimeUnit.NANOSECONDS);
            }
        });
        sleepNs(c.settleMs * MS_NS);
        long tid = workerTid();
        Sample a = sample(tid);
        sleepNs((long) (c.seconds * 1e9));
        Sample b = sample(tid);
        long pending = timer.pendingTimeouts();
        timer.stop();
        putParams(c);
        put(" settle_ms=" + c.settleMs + " sched_ns_per_op=" + f1((double) wall / n) + " pending="
            + pending);
        putWorkerDelta(a, b);
    }

    static void memory(Config c) {
        HashedWheelTimer timer = startTimer(c);
        int n = (int) c.n, p = (int) c.threads;
        long[] delays = uniformDelays(n, 10 * S_NS, 70 * S_NS, c.seed);
        sleepNs(50 * MS_NS);
        long heap0 = heapUsedAfterGc();
        long rss0 = rssBytes();
        runPhase(p, (self, threads) -> {
            for (int i = self; i < n; i += threads) {
                timer.newTimeout(NOOP, delays[i], TimeUnit.NANOSECONDS);
            }
        });
        sleepNs(c.settleMs * MS_NS);
        long heap1 = heapUsedAfterGc();
        long rss1 = rssBytes();
        long pending = timer.pendingTimeouts();
        putParams(c);
        put(" settle_ms=" + c.settleMs + " bytes_per_timeout=" + f1((double) (heap1 - heap0) / n)
            + " heap_before_kb=" + heap0 / 1024 + " heap_after_kb=" + heap1 / 1024
            + " rss_bytes_per_timeout=" + f1((double) (rss1 - rss0) / n) + " pending=" + pending);
        timer.stop();
        Reference.reachabilityFence(delays); /* allocated before heap0: keep it counted in heap1 */
    }

    static void run(Config c) throws IOException {
        switch (c.workload) {
            case "schedule": schedule(c); break;
            case "schedule_warm": scheduleWarm(c); break;
            case "cancel": cancel(c, false); break;
            case "cancel_own": cancel(c, true); break;
            case "churn": churn(c); break;
            case "expire":
            case "precision": expire(c); break;
            case "idle": idle(c); break;
            case "hold": hold(c); break;
            case "memory": memory(c); break;
            case "touch": touch(c, false); break;
            case "touch_early": touch(c, true); break;
            default: die("unknown workload '" + c.workload + "'");
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: HwtBench WORKLOAD [key=value ...]   (or: HwtBench version)");
            System.exit(2);
        }
        if (args[0].equals("version")) {
            String v = HashedWheelTimer.class.getPackage().getImplementationVersion();
            System.out.println("netty version=" + (v == null ? "unknown" : v) + " java="
                               + System.getProperty("java.vm.version"));
            return;
        }
        List<String> known = Arrays.asList("schedule", "schedule_warm", "cancel", "cancel_own",
                                           "churn", "expire", "precision", "idle", "hold",
                                           "memory", "touch", "touch_early");
        if (!known.contains(args[0])) {
            die("unknown workload '" + args[0] + "'");
        }
        Config c = parse(args);
        if (c.warmup > 0) {
            Config w = c.copy();
            w.n = c.warmup;
            w.dump = null;
            w.seconds = Math.min(c.seconds, 1.0);
            w.settleMs = Math.min(c.settleMs, 200);
            w.waitMs = Math.min(c.waitMs, 50);
            w.spanMs = Math.min(c.spanMs, 1000);
            run(w);
            System.err.println("# warm-up: " + line);
            line.setLength(0);
            worker = null;
            cpuMethod = "schedstat";
            /* No System.gc() here: a full GC right after the warm-up shrinks
             * G1's heap (to ~40 MB), and the measured run then pays for many
             * young collections and heap growth (cancel: 2-3x slower). */
        }
        timedFrom = 0; /* the warm-up's does not count */
        run(c);
        if (timedFrom != 0) {
            put(" timed_from_ns=" + timedFrom + " timed_to_ns=" + timedTo);
        }
        System.out.println(line);
        System.out.flush();
        System.exit(0); /* do not wait for a worker thread left by a failed stop */
    }
}
