#!/usr/bin/env bash
# follower-cpu.sh: writes through a follower, and the CPU each node spends
# per write, for several coord builds side by side (issue 15, writes
# through a follower at 256 clients). For each round, each client count
# and each target in turn: a fresh 3-node --insecure cluster on loopback,
# 1,000 keys of 256 bytes loaded, then loadgen's steady phase over wire
# given only one follower's address (as scripts/bench-vs-etcd.sh's
# "follower" cells), the three nodes' CPU read from /proc/PID/stat before
# and after it.
#
#   bench/scale/follower-cpu.sh ROUNDS "CLIENTS" TARGET...
#   bench/scale/follower-cpu.sh 3 "64 256" /tmp/coord-main /tmp/coord
#
# A TARGET is a coord binary. DURATION (default 5s) and PORT_BASE (default
# 29000) from the environment; VIA=leader serves the leader instead (the
# columns are then the leader, a follower and the other follower). With PROFILE=DIR the servers run with
# --pprof, and each run leaves in DIR a CPU profile of the follower and of
# the leader taken over the middle of the steady phase
# (DIR/RUN.{follower,leader}.pprof, RUN naming target, clients and round),
# then a runtime trace of each for a second (DIR/RUN.{follower,leader}.trace),
# and the follower's allocations since it started (DIR/RUN.follower.allocs).
# One line per run: target, via, clients, writes, writes/s, p50, the CPU per
# write (µs) of the node served, the next (the leader; with VIA=leader a
# follower) and the other, their sum, the writes per storage write (Ready
# persisted: coord_raft_append_seconds_count) of the three, the load average.
set -euo pipefail
rounds=$1 clients=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$here" && go build -o "$work/loadgen" ./loadgen)
base=${PORT_BASE:-29000} duration=${DURATION:-5s} profile=${PROFILE:-} via=${VIA:-follower}
. "$here/ports.sh"
check_port_base PORT_BASE "$base" 13

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# saves ENDPOINT: the node's storage writes so far (one per Ready it persisted).
saves() { curl -s "$1/metrics" | awk '/^coord_raft_append_seconds_count/ {print $2}'; }

# one TARGET CLIENTS ROUND: one run.
one() {
  local bin=$1 c=$2 round=$3 eps=() sflags=() i l f o res secs name prof=
  local -a c0 c1 s0 s1
  [ -n "$profile" ] && sflags=(--pprof)
  start_coord3 follower-cpu "$bin" "$work" "$base" "${sflags[@]}"
  l=$(curl -s "${eps[0]}/v1/status" | sed 's/.*"leader":\([0-9]*\).*/\1/')
  f=$((l % 3 + 1)) o=$(((l + 1) % 3 + 1)) # the follower served, the other
  if [ "$via" = leader ]; then f=$l l=$((l % 3 + 1)); fi # served: the leader; then two followers
  "$work/loadgen" --target coord --endpoints "${eps[$((f - 1))]}" --keys 1000 --duration 0 --wire >/dev/null
  for i in $f $l $o; do c0+=("$(cpu "${pids[$((i - 1))]}")") s0+=("$(saves "${eps[$((i - 1))]}")"); done
  if [ -n "$profile" ]; then
    secs=$(($(sed 's/[^0-9].*//' <<<"$duration") / 2))
    name="$profile/$(basename "$bin").$via.c$c.r$round"
    (sleep 1
      curl -s -o "$name.follower.pprof" "${eps[$((f - 1))]}/debug/pprof/profile?seconds=$secs" &
      curl -s -o "$name.leader.pprof" "${eps[$((l - 1))]}/debug/pprof/profile?seconds=$secs" &
      wait
      curl -s -o "$name.follower.trace" "${eps[$((f - 1))]}/debug/pprof/trace?seconds=1"
      curl -s -o "$name.leader.trace" "${eps[$((l - 1))]}/debug/pprof/trace?seconds=1"
      curl -s -o "$name.follower.allocs" "${eps[$((f - 1))]}/debug/pprof/allocs") &
    prof=$!
  fi
  res=$("$work/loadgen" --target coord --mode writes --endpoints "${eps[$((f - 1))]}" --keys 1000 --skip-load \
    --clients "$c" --duration "$duration" --wire | grep -E '^coord +steady ')
  for i in $f $l $o; do c1+=("$(cpu "${pids[$((i - 1))]}")") s1+=("$(saves "${eps[$((i - 1))]}")"); done
  [ -n "$prof" ] && wait "$prof"
  awk -v t="$bin" -v c="$c" -v tf=$((c1[0] - c0[0])) -v tl=$((c1[1] - c0[1])) -v to=$((c1[2] - c0[2])) \
    -v sf=$((s1[0] - s0[0])) -v sl=$((s1[1] - s0[1])) -v so=$((s1[2] - s0[2])) \
    -v hz="$(getconf CLK_TCK)" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
    -v via="$via" '{u = 1e6 / hz / $3; printf "%s via=%s clients=%s writes=%s writes/s=%s p50_ms=%s served_us/w=%.1f next_us/w=%.1f other_us/w=%.1f sum_us/w=%.1f writes/save=%.1f,%.1f,%.1f load=%s\n",
      t, via, c, $3, $4, $5, tf * u, tl * u, to * u, (tf + tl + to) * u, $3 / (sf ? sf : 1), $3 / (sl ? sl : 1), $3 / (so ? so : 1), load}' <<<"$res"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"/c?
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $duration, writes through a follower"
for r in $(seq "$rounds"); do
  for c in $clients; do
    for t in "$@"; do one "$t" "$c" "$r"; done
  done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
