# bench/plot.gnuplot - the expire workload's lateness distribution,
# libhwtimer against Netty, from the per-task dumps of
#   hwt-bench expire dump=FILE        and   HwtBench expire dump=FILE
# (lateness = run - (time scheduled + delay), in microseconds, sorted
# ascending, one per line). bench/compare calls it as
#
#   gnuplot -e "ours='A.txt'; netty='B.txt'; out='expire-lateness.png'; subtitle='...'" bench/plot.gnuplot
#
# Left: the CDF (share of tasks that ran within x ms of their due time);
# right: the tail, 1 - CDF, on log-log axes. The dashed lines are the goals
# (p99 <= 2 ms, max <= 5 ms).

if (!exists("ours"))  ours  = 'build/bench/expire-hwtimer.txt'
if (!exists("netty")) netty = 'build/bench/expire-netty.txt'
if (!exists("out"))   out   = 'bench/results/expire-lateness.png'
if (!exists("subtitle")) subtitle = ''

stats ours  using 1 nooutput name 'O'
stats netty using 1 nooutput name 'N'

# Plot about 20 000 points per curve (every step-th: with `every`, $0 counts
# the plotted points), plus the last 1000 (the tail, up to the maximum).
stepO = int(O_records / 20000) > 1 ? int(O_records / 20000) : 1
stepN = int(N_records / 20000) > 1 ? int(N_records / 20000) : 1
tailO = O_records > 1000 ? O_records - 1000 : 0
tailN = N_records > 1000 ? N_records - 1000 : 0

ms(us) = (us < 1.0 ? 1.0 : us) / 1000.0   # log axes: clamp at 1 us

set terminal pngcairo size 1400,560 font "sans,11" noenhanced
set output out
set multiplot layout 1,2 title sprintf("expire workload: lateness (run - due), %d timeouts, delays uniform in [0, 2 s), 1 ms tick, 2 producer threads\n%s", int(O_records), subtitle)

xmin = 0.01
xmax = 10 ** ceil(log10(ms(N_max > O_max ? N_max : O_max)) + 0.01)

set logscale x
set xrange [xmin:xmax]
set format x "%g"
set xlabel "lateness (ms, log scale)"
set grid xtics ytics mxtics
set key left top

set ylabel "share of tasks run within x"
set yrange [0:1]
set arrow 1 from 2, graph 0 to 2, graph 1 nohead dt 2 lc rgb "#555555"
set arrow 2 from 5, graph 0 to 5, graph 1 nohead dt 3 lc rgb "#555555"
set label 1 "goal p99 2 ms" at 2, graph 0.06 offset 0.5,0 font ",9"
set label 2 "goal max 5 ms" at 5, graph 0.12 offset 0.5,0 font ",9"
set title "CDF"
plot ours  every stepO using (ms($1)):(($0 * stepO + 1) / O_records) with lines lw 2 lc rgb "#1f77b4" title "libhwtimer", \
     ours  every ::tailO using (ms($1)):(($0 + tailO + 1) / O_records) with lines lw 2 lc rgb "#1f77b4" notitle, \
     netty every stepN using (ms($1)):(($0 * stepN + 1) / N_records) with lines lw 2 lc rgb "#d62728" title "Netty HashedWheelTimer", \
     netty every ::tailN using (ms($1)):(($0 + tailN + 1) / N_records) with lines lw 2 lc rgb "#d62728" notitle

set logscale y
set yrange [0.5 / (O_records > N_records ? O_records : N_records):1]
set format y "%.0e"
set ylabel "share of tasks later than x (1 - CDF)"
set key right top
unset label 1
unset label 2
set label 1 "goal p99 2 ms" at 2, graph 0.06 offset 0.5,0 font ",9"
set label 2 "goal max 5 ms" at 5, graph 0.12 offset 0.5,0 font ",9"
set title "tail (1 - CDF)"
plot ours  every stepO using (ms($1)):(1 - ($0 * stepO) / O_records) with lines lw 2 lc rgb "#1f77b4" title "libhwtimer", \
     ours  every ::tailO using (ms($1)):(1 - ($0 + tailO) / O_records) with lines lw 2 lc rgb "#1f77b4" notitle, \
     netty every stepN using (ms($1)):(1 - ($0 * stepN) / N_records) with lines lw 2 lc rgb "#d62728" title "Netty HashedWheelTimer", \
     netty every ::tailN using (ms($1)):(1 - ($0 + tailN) / N_records) with lines lw 2 lc rgb "#d62728" notitle

unset multiplot
