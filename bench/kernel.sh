#!/usr/bin/env bash
# The kernel's share of a benchmark's processor time, and what it spends
# it on: perf samples the benchmark's process (software clock, call
# graphs), and each sample is counted as the kernel's when its innermost
# frame is, as a page fault's when exc_page_fault is on its stack, as a
# write-protect fault's when do_wp_page is (a page first read, so mapped
# to the shared zero page, then written), as a TLB shootdown's when
# flush_tlb_mm_range is (the other processors told to drop the page's
# old mapping, an interrupt each), and as clearing when its innermost
# frame clears a page.
#
# usage: bench/kernel.sh PACKAGE BENCH-REGEX [BENCHTIME]
#   cd bench/peers && ../kernel.sh . '^BenchmarkConcurrentLoopchart$' 10x
# needs: perf (Debian package "linux-perf"), allowed to sample the
# process (kernel.perf_event_paranoid ≤ 2 for a process of one's own;
# kernel frames need ≤ 1 or root).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bench/kernel.sh PACKAGE BENCH-REGEX [BENCHTIME]" >&2
  exit 2
fi
pkg=$1 re=$2 benchtime=${3:-10x}
if ! command -v perf >/dev/null; then
  echo "bench/kernel.sh: perf not found (Debian package \"linux-perf\")" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/bench.test" "$pkg"
cd "$pkg"
perf record -q -e cpu-clock -g -o "$dir/perf.data" "$dir/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime "$benchtime" >"$dir/out"
grep -E '^Benchmark' "$dir/out" || true
perf script -i "$dir/perf.data" 2>/dev/null | awk '
  function flush() {
    if (!n) return
    total++
    if (kernel0) {
      kernel++
      if (fault) faults++
      if (wp) wps++
      if (tlb) tlbs++
      if (clear) clears++
    }
    n = kernel0 = fault = wp = tlb = clear = 0
  }
  /^[^ \t]/ { flush(); next }
  /^$/ { flush(); next }
  {
    n++
    if (n == 1 && /\[kernel/) { kernel0 = 1; if (/clear_page/) clear = 1 }
    if (/exc_page_fault/) fault = 1
    if (/do_wp_page/) wp = 1
    if (/flush_tlb_mm_range/) tlb = 1
  }
  END {
    flush()
    if (!total) { print "no samples" > "/dev/stderr"; exit 1 }
    printf "%d samples: kernel %.1f %%, page faults %.1f %% (write-protect faults %.1f %%, TLB shootdowns %.1f %%), clearing pages %.1f %%\n",
      total, 100*kernel/total, 100*faults/total, 100*wps/total, 100*tlbs/total, 100*clears/total
  }'
