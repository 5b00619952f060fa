# bench/plot-peers.gnuplot - the expire workload's lateness distribution for
# libhwtimer and every peer, as bench/compare-peers writes it: one file per
# side with three columns, lateness in ms, the CDF at that point, and the
# share of tasks at least that late (1 - CDF before it), thinned to about
# 20 000 points plus the last 1000 (the tail). bench/compare-peers calls it as
#
#   gnuplot -e "files='a.cdf b.cdf'; titles='libhwtimer netty'; out='x.png'; subtitle='...'" bench/plot-peers.gnuplot
#
# Left: the CDF (share of tasks run within x ms of their due time); right:
# the tail, on log-log axes. Dashed: the goals of libhwtimer (p99 2 ms, max
# 5 ms). A side that ran tasks early has no point left of 1 us (x is
# clamped there): its early count is in the table.

if (!exists("files")) files = ''
if (!exists("titles")) titles = files
if (!exists("out")) out = 'bench/results/peers-expire-lateness.png'
if (!exists("subtitle")) subtitle = ''

N = words(files)
array colours[7] = ["#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#2ca02c", "#8c564b", "#e377c2"]
colour(i) = colours[(i - 1) % 7 + 1]

xmax = 0.01
ymin = 1
do for [i = 1:N] {
    stats word(files, i) using 1:3 nooutput
    if (STATS_max_x > xmax) { xmax = STATS_max_x }
    if (STATS_min_y < ymin) { ymin = STATS_min_y }
}
xmax = 10 ** ceil(log10(xmax) + 0.01)

set terminal pngcairo size 1400,600 font "sans,11" noenhanced
set output out
set multiplot layout 1,2 title sprintf("expire workload: lateness (run - due), delays uniform in [0, span_ms), 2 producer threads\n%s", subtitle)

set logscale x
set xrange [0.001:xmax]
set format x "%g"
set xlabel "lateness (ms, log scale)"
set grid xtics ytics mxtics
set key left top

set ylabel "share of tasks run within x"
set yrange [0:1]
set arrow 1 from 2, graph 0 to 2, graph 1 nohead dt 2 lc rgb "#555555"
set arrow 2 from 5, graph 0 to 5, graph 1 nohead dt 3 lc rgb "#555555"
set title "CDF"
plot for [i = 1:N] word(files, i) using 1:2 with lines lw 2 lc rgb colour(i) title word(titles, i)

set logscale y
set yrange [ymin / 2:1]
set format y "%.0e"
set ylabel "share of tasks at least x late (1 - CDF)"
set key right top
set title "tail (1 - CDF)"
plot for [i = 1:N] word(files, i) using 1:3 with lines lw 2 lc rgb colour(i) title word(titles, i)

unset multiplot
