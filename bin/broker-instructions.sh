#!/usr/bin/env bash
# Instructions and heap allocations per message in each broker of broker_bench's 3-node group,
# counted by valgrind's callgrind. Unlike CPU time, these counts do not move with steal time or
# with what else the machine runs, so a change to the send path can be compared on a noisy VM.
# The kernel's share (system calls, page faults, scheduling) is not counted.
#
# usage: bin/broker-instructions.sh [SECONDS]   (default 30; needs valgrind, callgrind_control
# and callgrind_annotate on PATH: apt-get install valgrind)
#
# The brokers run under callgrind (about 30 times slower), so the group sends ~1-2k msg/s. The
# counters are reset once the senders are going and dumped 2/3 into the run; messages are
# counted as the calls of ConsumeQueue::append (one per stored message, on every member).
# BROKER_INSTRUCTIONS_KEEP=DIR keeps the callgrind files there, for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-30}"
for tool in valgrind callgrind_control callgrind_annotate; do
  command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install valgrind)" >&2; exit 2; }
done
cargo build --release -p tests --bins
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/out" "$work/tmp"
cp target/release/{broker_bench,it-mqnamesrv,ledger_node} "$work/bin/"
cp target/release/it-mqbroker "$work/bin/real-mqbroker"
cat >"$work/bin/it-mqbroker" <<EOF
#!/usr/bin/env bash
exec valgrind --tool=callgrind --callgrind-out-file=$work/out/cg.%p $work/bin/real-mqbroker "\$@"
EOF
chmod +x "$work/bin/it-mqbroker"
# callgrind_control finds the brokers through files in their TMPDIR.
export TMPDIR="$work/tmp"
BROKER_BENCH_ONLY=broker "$work/bin/broker_bench" "$secs" | tail -n 1 &
bench=$!
sleep "$(( secs / 3 + 8 ))"
callgrind_control -z >/dev/null 2>&1
sleep "$(( secs / 3 ))"
callgrind_control -d >/dev/null 2>&1
wait "$bench"
if [ -n "${BROKER_INSTRUCTIONS_KEEP:-}" ]; then
  mkdir -p "$BROKER_INSTRUCTIONS_KEEP" && cp "$work"/out/cg.*.1 "$BROKER_INSTRUCTIONS_KEEP"/
fi
printf '%-10s %12s %14s %12s %12s\n' member messages instructions 'Ir/msg' 'allocs/msg'
for f in "$work"/out/cg.*.1; do
  [ -s "$f" ] || continue
  totals="$(callgrind_annotate --inclusive=yes --threshold=100 --tree=caller "$f" 2>/dev/null)"
  ir="$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}' <<<"$totals")"
  msgs="$(grep -oE 'ConsumeQueue::append \([0-9,]+x\)' <<<"$totals" | head -n 1 | grep -oE '[0-9,]+' | tr -d , || true)"
  # Heap allocations: the calls of Rust's global allocator entry point (`__rust_alloc`),
  # summed over its callers, whichever allocator is behind it.
  allocs="$(awk '/^$/ {n=0} /< .*\([0-9,]+x\)/ {s=$0; sub(/.*\(/, "", s); sub(/x\).*/, "", s); gsub(",", "", s); n+=s} /\*  .*:__rustc::__rust_alloc \[/ {print n+0; found=1; exit} END {if (!found) print 0}' <<<"$totals")"
  msgs="${msgs:-0}"
  if [ "$msgs" -gt 0 ]; then
    printf '%-10s %12d %14d %12d %12.1f\n' "$(basename "$f" .1)" "$msgs" "$ir" "$(( ir / msgs ))" \
      "$(awk -v a="$allocs" -v m="$msgs" 'BEGIN {print a / m}')"
  fi
done
