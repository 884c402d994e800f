#!/usr/bin/env bash
# Times benchmarks taking turns: one test binary, every benchmark in a
# process of its own, ROUNDS rounds of all of them in order, so that a
# noisy machine's drift falls on them alike. For each benchmark it prints
# the median and the range of one metric (METRIC, ns/step by default;
# ns/op or steps/s work too); for each one after the first, the ratio of
# its median to the first's, and the range and the median of the ratios
# within a round.
#
# usage: ROUNDS=8 METRIC=ns/step BENCHTIME=1s bench/rounds.sh PACKAGE BENCH-REGEX...
#   cd bench/peers && ../rounds.sh . '^BenchmarkEino$/^k=50$' '^BenchmarkLoopchart$/^k=50$'
#
# A BENCH-REGEX written BINARY@REGEX runs REGEX in the test binary BINARY
# (an absolute path; built before with go test -c, from another tree say)
# instead of the package's: two trees side by side, and a peer, in the
# same rounds.
#   git stash && go test -c -o /tmp/before.test . && git stash pop
#   ../rounds.sh . '^BenchmarkEino$/^k=50$' /tmp/before.test@'^BenchmarkLoopchart$/^k=50$' '^BenchmarkLoopchart$/^k=50$'
set -euo pipefail
pkg=$1
shift
if [ $# -eq 0 ]; then
  echo "usage: bench/rounds.sh PACKAGE BENCH-REGEX..." >&2
  exit 2
fi
rounds=${ROUNDS:-8}
metric=${METRIC:-ns/step}
benchtime=${BENCHTIME:-1s}
bin=$(mktemp)
vals=$(mktemp)
trap 'rm -f "$bin" "$vals"' EXIT
go test -c -o "$bin" "$pkg"
cd "$pkg"
for r in $(seq 1 "$rounds"); do
  i=0
  for arg in "$@"; do
    run=$bin
    re=$arg
    if [[ $arg == *@* && -x ${arg%%@*} ]]; then
      run=${arg%%@*}
      re=${arg#*@}
    fi
    v=$("$run" -test.run '^$' -test.bench "$re" -test.benchtime "$benchtime" 2>&1 |
      awk -v m="$metric" '/^Benchmark/ { for (j = 3; j <= NF; j++) if ($j == m) { print $(j - 1); exit } }')
    if [ -z "$v" ]; then
      echo "$arg: no $metric in its output (did the benchmark run?)" >&2
      exit 1
    fi
    echo "$r $i $v" >>"$vals"
    i=$((i + 1))
  done
done
# median of the numbers on stdin, one per line
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ref=$(awk '$2 == 0 { print $3 }' "$vals" | median)
i=0
for re in "$@"; do
  col=$(awk -v i="$i" '$2 == i { print $3 }' "$vals")
  med=$(echo "$col" | median)
  lo=$(echo "$col" | sort -g | head -n 1)
  hi=$(echo "$col" | sort -g | tail -n 1)
  line=$(printf '%-45s median %10.1f %s  range %.1f–%.1f' "$re" "$med" "$metric" "$lo" "$hi")
  if [ "$i" -gt 0 ]; then
    ratios=$(awk -v i="$i" '$2 == 0 { r[$1] = $3 } $2 == i { x[$1] = $3 } END { for (k in x) print x[k] / r[k] }' "$vals")
    rmed=$(echo "$ratios" | median)
    rlo=$(echo "$ratios" | sort -g | head -n 1)
    rhi=$(echo "$ratios" | sort -g | tail -n 1)
    line+=$(awk -v m="$med" -v f="$ref" -v a="$rlo" -v b="$rhi" -v c="$rmed" \
      'BEGIN { printf "  ÷ first %.3f× (per round %.2f–%.2f×, median %.2f×)", m / f, a, b, c }')
  fi
  echo "$line"
  i=$((i + 1))
done
echo "($rounds rounds, -test.benchtime $benchtime)"
