#!/usr/bin/env bash
# Instructions per benchmark op, counted by valgrind's callgrind: unlike
# ns/op, the count is repeatable on a noisy machine. It runs the benchmark
# at N=10000 and N=20000 and divides the difference by 10000, so set-up and
# the first b.N=1 round cancel out.
#
# usage: bench/instr.sh PACKAGE BENCH-REGEX...
#   bench/instr.sh ./machines/turn '^BenchmarkTurnTransition$' '^BenchmarkTurnBareStateless$'
# needs: valgrind (Debian package "valgrind"); Go's async preemption signals
# are off under it (callgrind asserts on them).
set -euo pipefail
pkg=$1; shift
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" "$pkg"
cd "$pkg"
count() {
  GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" -test.run '^$' -test.bench "$1" \
    -test.benchtime "$2x" -test.cpu 1 2>&1 | awk '/I +refs/ {gsub(",", "", $4); print $4}'
}
n=${N:-10000}
for re in "$@"; do
  a=$(count "$re" "$n"); b=$(count "$re" $((2 * n)))
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "$re: no instruction count (did the benchmark run?)" >&2
    exit 1
  fi
  printf '%-50s %8d instructions/op\n' "$re" $(( (b - a) / n ))
done
