#!/usr/bin/env bash
# write-p50.sh: the single-client write's latency against one fsync, for
# one or more coord builds side by side (issue 15's "p50 ≤ 2.5 fsyncs").
#
# Starts a 3-node cluster (--insecure, loopback, fsync on) of each build
# given, loads KEYS keys into each, then runs ROUNDS rounds: in each, the
# builds in turn (the order rotating from round to round) take a
# single-client wire write load (bench/scale/loadgen --clients 1 --wire
# --mode writes) through their leader for DURATION, and two fsyncs are
# timed beside them:
#   dd_ms       dd oflag=dsync, 4 KiB, 200 writes appended to a new file
#               (what scripts/bench-vs-etcd.sh calls one fsync: it grows
#               the file, so every sync also commits ext4's journal);
#   overwrite_ms the same 200 writes over a file already written and
#               synced (conv=notrunc): a data-only fdatasync, what the
#               WAL's preallocated segments mostly pay.
# Each line: round, build, writes/s, p50 ms (loadgen's, to the µs: the
# write is a fraction of a ms, and 0.1 ms steps were a sixth of it), mean
# ms (1 s / writes/s at one client), dd_ms, overwrite_ms, p50 in dd
# fsyncs, the CPU and switches per write (below), load average. The end
# prints medians per build, of these same columns.
#
#   bench/scale/write-p50.sh ROUNDS DURATION COORD...
#   bench/scale/write-p50.sh 5 4s /tmp/s8/coord /tmp/coord-new
#
# A build given as COORD,LOADGEN runs its rounds with that prebuilt
# loadgen instead of this tree's: a change to the client's side (coord's
# client, apiwire's transport) is then measured side by side too.
#
# PORT_BASE (default 27100) is the first port tried; each build takes six.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../scripts/lib.sh
source "$root/scripts/lib.sh"
rounds=${1:?rounds} duration=${2:?duration}
shift 2
builds=("$@")
[ ${#builds[@]} -gt 0 ] || { echo "write-p50: name at least one coord binary" >&2; exit 2; }
keys=${KEYS:-1000} vbytes=${VALUE_BYTES:-256}

work=$(mktemp -d -t write-p50.XXXXXX)
# DATA (default: under the work directory) holds the servers' data
# directories; DATA=/dev/shm takes the disk out (fsync then costs nothing),
# leaving the CPU and scheduling path alone.
data=$(mktemp -d -p "${DATA:-$work}" write-p50-data.XXXXXX)
pids=()
cleanup() {
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work" "$data"
}
trap cleanup EXIT
(cd "$root/bench/scale" && go build -o "$work/loadgen" ./loadgen)

next=${PORT_BASE:-27100}
eps=()   # per build: its three API endpoints, comma-separated
bpids=() # per build: its three server processes, space-separated
lgs=()   # per build: its loadgen
for b in "${!builds[@]}"; do
  lgs[b]=$work/loadgen
  if [[ ${builds[b]} == *,* ]]; then
    lgs[b]=${builds[b]#*,} builds[b]=${builds[b]%%,*}
  fi
  ports=()
  while [ ${#ports[@]} -lt 6 ]; do
    next=$(free_port "$next")
    ports+=("$next")
    next=$((next + 1))
  done
  peers=""
  for i in 1 2 3; do peers+="$i=127.0.0.1:${ports[i - 1]},"; done
  list="" plist=""
  for i in 1 2 3; do
    "${builds[b]}" server --insecure --id "$i" --peers "${peers%,}" --http "127.0.0.1:${ports[i + 2]}" \
      --data "$data/b$b-$i" --log-level error >>"$work/b$b.log" 2>&1 &
    pids+=($!) plist+="$! "
    list+="http://127.0.0.1:${ports[i + 2]},"
  done
  eps+=("${list%,}") bpids+=("$plist")
done

# leader_of ENDPOINTS prints the leader's endpoint once all three agree.
leader_of() {
  local l="" s e
  IFS=, read -ra all <<<"$1"
  for e in "${all[@]}"; do
    s=$(curl -sf "$e/v1/status" | sed -n 's/.*"leader":\([0-9]*\).*/\1/p') || return 1
    [ -n "$s" ] && [ "$s" != 0 ] || return 1
    [ -z "$l" ] || [ "$l" = "$s" ] || return 1
    l=$s
  done
  echo "${all[l - 1]}"
}
for b in "${!builds[@]}"; do
  for _ in $(seq 300); do leader_of "${eps[b]}" >/dev/null 2>&1 && break; sleep 0.2; done
  "${lgs[b]}" --keys "$keys" --value-bytes "$vbytes" --endpoints "${eps[b]}" --duration 0 >/dev/null
done

# fsync_ms FLAGS...: one synchronous 4 KiB write's time, over 200.
fsync_ms() {
  dd if=/dev/zero of="$work/fsync" bs=4k count=200 oflag=dsync "$@" 2>&1 |
    sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p' | awk '{printf "%.3f", $1 * 1000 / 200}'
}
# cost PIDS...: CPU time (ns) and voluntary context switches of every
# thread of the processes, summed.
cost() {
  local p cpu=0 sw=0 t c v
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      read -r c _ <"$t/schedstat" || continue
      v=$(sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' "$t/status")
      cpu=$((cpu + c)) sw=$((sw + v))
    done
  done
  echo "$cpu $sw"
}
results=$work/results
# Per write: the three servers' CPU (µs) and voluntary context switches
# (each a thread that blocked and was woken again: hand-offs, waits for
# the disk and the network), and loadgen's (the client's) CPU and
# switches, from /usr/bin/time over its whole run (start-up included).
printf '%-5s %-3s %8s %7s %7s %7s %9s %8s %8s %8s %8s %8s %s\n' round b "writes/s" "p50 ms" "mean ms" "dd ms" "overw ms" "p50/dd" \
  "srv µs/w" "srv sw/w" "cli µs/w" "cli sw/w" load
for r in $(seq "$rounds"); do
  n=${#builds[@]}
  for k in $(seq 0 $((n - 1))); do
    b=$(((k + r) % n))
    rm -f "$work/fsync"
    dd=$(fsync_ms)
    ow=$(fsync_ms conv=notrunc)
    leader=$(leader_of "${eps[b]}")
    # shellcheck disable=SC2086
    read -r cpu0 sw0 <<<"$(cost ${bpids[b]})"
    line=$(/usr/bin/time -o "$work/time" -f '%U %S %w' "${lgs[b]}" --keys "$keys" --value-bytes "$vbytes" \
      --endpoints "$leader" --skip-load --clients 1 --duration "$duration" --mode writes --wire |
      grep -E '^coord +steady ' || true)
    # shellcheck disable=SC2086
    read -r cpu1 sw1 <<<"$(cost ${bpids[b]})"
    [ -n "$line" ] || { echo "write-p50: build $b: no result" >&2; continue; }
    awk -v r="$r" -v b="$b" -v dd="$dd" -v ow="$ow" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
      -v cpu=$((cpu1 - cpu0)) -v sw=$((sw1 - sw0)) -v t="$(cat "$work/time")" \
      '{split(t, c, " "); printf "%-5s %-3s %8.0f %7.3f %7.3f %7.3f %9.3f %7.2fx %8.0f %8.1f %8.0f %8.1f %s\n",
        r, b, $4, $5, 1000 / $4, dd, ow, $5 / dd, cpu / 1000 / $3, sw / $3, (c[1] + c[2]) * 1e6 / $3, c[3] / $3, load}' <<<"$line" |
      tee -a "$results"
  done
done

median() { sort -n | awk '{a[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "# medians over $rounds rounds of $duration, $keys keys of $vbytes bytes, $(nproc) cores"
for b in "${!builds[@]}"; do
  col() { awk -v b="$b" -v c="$1" '$2 == b {print $c}' "$results" | median; }
  echo "build $b (${builds[b]}, ${lgs[b]##*/}): writes/s $(col 3), p50 $(col 4) ms, mean $(col 5) ms, dd $(col 6) ms, overwrite $(col 7) ms, p50/dd $(col 8);" \
    "per write: servers $(col 9) µs CPU, $(col 10) switches; client $(col 11) µs CPU, $(col 12) switches"
done
