#!/usr/bin/env bash
# Instructions per benchmark op, counted by valgrind's callgrind: unlike
# ns/op, the count is repeatable on a noisy machine. It runs the benchmark
# at N=10000 and N=20000 and divides the difference by 10000, so set-up and
# the first b.N=1 round cancel out.
#
# usage: bench/instr.sh PACKAGE BENCH-REGEX...
#   bench/instr.sh ./machines/turn '^BenchmarkTurnTransition$' '^BenchmarkTurnBareStateless$'
# needs: valgrind (Debian package "valgrind")
set -euo pipefail
pkg=$1; shift
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" "$pkg"
cd "$pkg"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" -test.run '^$' -test.bench "$1" \
    -test.benchtime "$2x" -test.cpu 1 2>&1 | awk '/I +refs/ {gsub(",", "", $4); print $4}'
}
for re in "$@"; do
  a=$(count "$re" 10000); b=$(count "$re" 20000)
  printf '%-50s %8d instructions/op\n' "$re" $(( (b - a) / 10000 ))
done
