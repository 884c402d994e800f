#!/usr/bin/env bash
# Locked instructions per benchmark op: the atomic read-modify-writes
# (LOCK-prefixed instructions and XCHG with memory: every mutex lock and
# unlock, atomic add, swap and store) that a benchmark executes, counted
# by valgrind's callgrind, per function. An instruction count treats them
# like any other, but each costs several nanoseconds (a sync.Mutex lock
# and unlock pair took about 10 ns on the 2-core VM of the README), so two
# loops with the same instruction count can differ in time by them.
#
# It runs the benchmark at N and 3N ops (N=300 by default) and divides the
# difference by 2N times PER (the steps in one op, 1 by default), so
# set-up cancels out, then prints the total and the functions above 0.5
# per op.
#
# usage: [GOGC=off] [N=300] [PER=51] bench/locked.sh PACKAGE BENCH-REGEX
# (GOGC=off leaves the collector's own atomics out, as the README's counts do)
#   cd bench/peers && GOGC=off PER=51 ../locked.sh . '^BenchmarkLoopchartRawTool$/^k=50$'
# needs: valgrind, objdump (binutils), awk.
set -euo pipefail
pkg=$1
re=$2
n=${N:-300}
per=${PER:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/bin" "$pkg"
# The addresses of the locked instructions, with their functions.
objdump -d --no-show-raw-insn "$dir/bin" |
  awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } /\tlock / || (/\txchg/ && /\(/) { a = $1; sub(":", "", a); print a, fn }' >"$dir/locked"
run() {
  GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --dump-instr=yes --compress-pos=no \
    --compress-strings=no --callgrind-out-file="$dir/out.$1" "$dir/bin" -test.run '^$' -test.bench "$re" \
    -test.benchtime "$1x" >/dev/null 2>&1
}
cd "$pkg"
run "$n"
run $((3 * n))
# Per locked address, the times it ran (its Ir: one per execution); a
# line after calls= is the call's inclusive cost, not the instruction's.
awk -v n="$n" -v per="$per" -v small="$dir/out.$n" '
  FILENAME == ARGV[1] { fn[$1] = $2; next }
  /^calls=/ { skip = 1; next }
  skip { skip = 0; next }
  /^0x/ {
    a = substr($1, 3); sub(/^0+/, "", a)
    if (a in fn) { c = $NF + 0; if (FILENAME == small) cnt[fn[a]] -= c; else cnt[fn[a]] += c }
  }
  END {
    for (f in cnt) { v = cnt[f] / (2 * n * per); total += v; if (v >= 0.5) printf "%8.2f %s\n", v, f | "sort -rn" }
    close("sort -rn")
    printf "%8.1f locked instructions per op%s\n", total, (per > 1 ? " ÷ " per : "")
  }' "$dir/locked" "$dir/out.$n" "$dir/out.$((3 * n))"
