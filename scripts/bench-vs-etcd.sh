#!/usr/bin/env bash
# bench-vs-etcd.sh: coord and etcd side by side on this machine (issue 15).
#
# Starts a 3-node coord cluster (this tree's build, --insecure: etcd runs
# without TLS too) and a 3-member etcd (Debian's etcd-server, installed if
# missing), both on loopback with fsync on, loads KEYS keys into each, then
# runs one Go load generator (bench/scale/loadgen, its own module) against
# both, interleaved (coord then etcd, the next cell etcd then coord), at
# each client count, through the leader and through a follower (a client
# that knows only that member's address), writes and linearizable reads.
# The leader is looked up again before each cell. It ends with a table of
# ratios (coord / etcd, medians over ROUNDS), one fsync's time measured in
# the same run (dd oflag=dsync), and the load average. docs/BENCHMARKS.md
# shows a run.
#
#   scripts/bench-vs-etcd.sh [DURATION] [ROUNDS]      # default 5s 1
#   CLIENTS="1 64" KEYS=1000 VALUE_BYTES=256 COORD=/tmp/coord scripts/bench-vs-etcd.sh 10s 3
#   CLIENTS=64 MODES=reads VIAS="leader follower" scripts/bench-vs-etcd.sh 5s 3   # reads only
#   COORD_PROTO=http1 CLIENTS="16 64 256" scripts/bench-vs-etcd.sh 5s 1  # coord's cells over HTTP/1.1
#
# COORD_PROTO picks how the load generator talks to coord: wire (the
# default: coord's multiplexed connection, loadgen --wire, as etcd's
# client multiplexes gRPC) or http1 (one HTTP/1.1 request per connection
# at a time).
#
# Raw lines go to stderr as they come; the table to stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib.sh
source "$root/scripts/lib.sh"
log() { printf 'bench-vs-etcd: %s\n' "$*" >&2; }
duration=${1:-5s} rounds=${2:-1}
clients=${CLIENTS:-1 16 64 256} keys=${KEYS:-1000} vbytes=${VALUE_BYTES:-256}
# MODES and VIAS pick the cells: writes and/or reads, through the leader
# and/or a follower.
modes=${MODES:-writes reads} vias=${VIAS:-leader follower}
coord_proto=${COORD_PROTO:-wire} coord_flags=()
case $coord_proto in
  http1) ;;
  wire) coord_flags=(--wire) ;;
  *) echo "bench-vs-etcd: COORD_PROTO=$coord_proto: want http1 or wire" >&2; exit 2 ;;
esac

command -v etcd >/dev/null || ensure_pkg etcd-server
command -v etcdctl >/dev/null || ensure_pkg etcd-client

work=$(mktemp -d -t bench-vs-etcd.XXXXXX)
pids=()
cleanup() {
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work" "$COORD_TEST_TMP"
}
trap cleanup EXIT

coord=${COORD:-}
if [ -z "$coord" ]; then
  log "building coord"
  (cd "$root" && go build -o "$work/coord" ./cmd/coord)
  coord=$work/coord
fi
log "building the load generator"
(cd "$root/bench/scale" && go build -o "$work/loadgen" ./loadgen)

# Ports: the first twelve free ones from 27300.
ports=() next=27300
while [ ${#ports[@]} -lt 12 ]; do
  next=$(free_port "$next")
  ports+=("$next")
  next=$((next + 1))
done

coord_eps=() coord_pids=() peers=""
cp=("${ports[@]:0:3}") ch=("${ports[@]:3:3}")
for i in 1 2 3; do peers+="$i=127.0.0.1:${cp[i - 1]},"; done
for i in 1 2 3; do
  "$coord" server --insecure --id "$i" --peers "${peers%,}" --http "127.0.0.1:${ch[i - 1]}" \
    --data "$work/coord-$i" --log-level error >>"$work/coord.log" 2>&1 &
  pids+=($!) coord_pids+=($!)
  coord_eps+=("http://127.0.0.1:${ch[i - 1]}")
done

etcd_eps=() etcd_pids=() cluster=""
ep=("${ports[@]:6:3}") ec=("${ports[@]:9:3}")
for i in 1 2 3; do cluster+="e$i=http://127.0.0.1:${ep[i - 1]},"; done
for i in 1 2 3; do
  etcd --name "e$i" --data-dir "$work/etcd-$i" --log-level error \
    --listen-client-urls "http://127.0.0.1:${ec[i - 1]}" --advertise-client-urls "http://127.0.0.1:${ec[i - 1]}" \
    --listen-peer-urls "http://127.0.0.1:${ep[i - 1]}" --initial-advertise-peer-urls "http://127.0.0.1:${ep[i - 1]}" \
    --initial-cluster "${cluster%,}" 2>>"$work/etcd.log" &
  pids+=($!) etcd_pids+=($!)
  etcd_eps+=("127.0.0.1:${ec[i - 1]}")
done

# coord_leader prints the index (0-2) of coord's leader, once all agree.
coord_leader() {
  local l="" s
  for e in "${coord_eps[@]}"; do
    s=$(curl -sf "$e/v1/status" | sed -n 's/.*"leader":\([0-9]*\).*/\1/p') || return 1
    [ -n "$s" ] && [ "$s" != 0 ] || return 1
    [ -z "$l" ] || [ "$l" = "$s" ] || return 1
    l=$s
  done
  echo $((l - 1))
}

# etcd_leader prints the index (0-2) of etcd's leader.
etcd_leader() {
  local i s
  for i in 0 1 2; do
    s=$(ETCDCTL_API=3 etcdctl --endpoints "${etcd_eps[i]}" endpoint status -w json 2>/dev/null) || return 1
    [ "$(sed -n 's/.*"member_id":\([0-9]*\).*/\1/p' <<<"$s")" = "$(sed -n 's/.*"leader":\([0-9]*\).*/\1/p' <<<"$s")" ] && { echo "$i"; return 0; }
  done
  return 1
}

# wait_for NAME CMD: until CMD succeeds, for up to 60 s.
wait_for() {
  local name=$1
  shift
  for _ in $(seq 300); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "bench-vs-etcd: $name has no leader; see $work/$name.log" >&2
  tail -5 "$work/$name.log" >&2
  exit 1
}
wait_for coord coord_leader
wait_for etcd etcd_leader

lg() { "$work/loadgen" --keys "$keys" --value-bytes "$vbytes" "$@"; }
log "loading $keys keys of $vbytes bytes into each"
lg --target coord --endpoints "$(IFS=,; echo "${coord_eps[*]}")" --duration 0 >&2
lg --target etcd --endpoints "$(IFS=,; echo "${etcd_eps[*]}")" --duration 0 >&2

# One fsync on this disk, now: 200 synchronous 4 KiB writes.
fsync_ms=$(dd if=/dev/zero of="$work/fsync" bs=4k count=200 oflag=dsync 2>&1 |
  sed -n 's/.* copied, \([0-9.]*\) s.*/\1/p' | awk '{printf "%.3f", $1 * 1000 / 200}')
rm -f "$work/fsync"

results=$work/results
load0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $load0; $rounds rounds of $duration per cell; $keys keys of $vbytes bytes" >&2
cell=0
# run TARGET VIA MODE CLIENTS ROUND: one cell, appended to $results.
run() {
  local target=$1 via=$2 mode=$3 n=$4 r=$5 i line eps pidlist flags=()
  if [ "$target" = coord ]; then
    i=$(coord_leader) || i=0
    eps=("${coord_eps[@]}") pidlist=$(IFS=,; echo "${coord_pids[*]}") flags=("${coord_flags[@]}")
  else
    i=$(etcd_leader) || i=0
    eps=("${etcd_eps[@]}") pidlist=$(IFS=,; echo "${etcd_pids[*]}")
  fi
  [ "$via" = follower ] && i=$(((i + 1) % 3))
  line=$(lg --target "$target" --endpoints "${eps[i]}" --skip-load --clients "$n" --duration "$duration" \
    --mode "$mode" --pids "$pidlist" "${flags[@]}" | grep -E "^$target +(steady|reads) " || true)
  echo "$target $via (member $((i + 1))) $mode $n clients: ${line:-failed}" >&2
  # round clients via mode target ops/s p50
  [ -n "$line" ] && awk -v r="$r" -v n="$n" -v via="$via" -v m="$mode" -v t="$target" \
    '{print r, n, via, m, t, $4, $5}' <<<"$line" >>"$results"
  return 0
}
for r in $(seq "$rounds"); do
  for n in $clients; do
    for via in $vias; do
      for mode in $modes; do
        if [ $((cell % 2)) = 0 ]; then order="coord etcd"; else order="etcd coord"; fi
        cell=$((cell + 1))
        for t in $order; do run "$t" "$via" "$mode" "$n" "$r"; done
      done
    done
  done
done

median() { sort -n | awk '{a[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
pick() { awk -v n="$1" -v via="$2" -v m="$3" -v t="$4" -v col="$5" '$2 == n && $3 == via && $4 == m && $5 == t {print $col}' "$results" | median; }

echo "# coord ($coord_proto) vs etcd $(etcd --version | sed -n 's/etcd Version: //p'), 3 members each on loopback, fsync on, no TLS; $(nproc) cores"
echo "# load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; medians of $rounds rounds of $duration"
echo "# one fsync (dd oflag=dsync, 4 KiB): $fsync_ms ms"
printf '%-8s %-9s %-7s %10s %10s %7s %9s %9s\n' clients via op "coord/s" "etcd/s" ratio "coord p50" "etcd p50"
for n in $clients; do
  for via in $vias; do
    for mode in $modes; do
      c=$(pick "$n" "$via" "$mode" coord 6) e=$(pick "$n" "$via" "$mode" etcd 6)
      cp50=$(pick "$n" "$via" "$mode" coord 7) ep50=$(pick "$n" "$via" "$mode" etcd 7)
      awk -v n="$n" -v via="$via" -v m="$mode" -v c="$c" -v e="$e" -v cp="$cp50" -v ep="$ep50" \
        'BEGIN {printf "%-8s %-9s %-7s %10.0f %10.0f %6.2fx %7.2fms %7.2fms\n", n, via, m, c, e, (e > 0 ? c / e : 0), cp, ep}'
    done
  done
done
