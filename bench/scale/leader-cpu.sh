#!/usr/bin/env bash
# leader-cpu.sh: the leader's CPU per operation and the operations a second,
# for several coord builds side by side (issues 15 and 21, the HTTP cost on
# the leader). For each round, each client count and each target in turn:
# a fresh 3-node --insecure cluster on loopback, 1,000 keys of 256 bytes
# loaded, then loadgen's steady phase through the leader for DURATION,
# the leader's CPU read from /proc/PID/stat before and after it.
#
#   bench/scale/leader-cpu.sh ROUNDS MODE "CLIENTS" TARGET...
#   bench/scale/leader-cpu.sh 2 writes "1 16 64" /tmp/coord-main /tmp/coord /tmp/coord+h2c
#
# MODE is loadgen's (writes or reads). A TARGET is a coord binary; with
# "+h2c" after it, the servers run with --http2 and loadgen speaks h2c
# (--http2); with "+wire", loadgen speaks coord's multiplexed connection
# (--wire; the servers serve it by default). DURATION (default 8s) and PORT_BASE (default 28400) from the
# environment. One line per run: target, protocol, ops, ops/s, p50, the
# leader's CPU per operation, the load average.
set -euo pipefail
rounds=$1 mode=$2 clients=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$here" && go build -o "$work/loadgen" ./loadgen)
base=${PORT_BASE:-28400} duration=${DURATION:-8s}
. "$here/ports.sh"
check_port_base PORT_BASE "$base" 13

# one TARGET CLIENTS: one run.
one() {
  local bin=${1%+h2c} c=$2 sflags=() lflags=() proto=http1 eps=() i l lp c0 c1 res
  if [ "$1" != "$bin" ]; then sflags=(--http2) lflags=(--http2) proto=h2c; fi
  if [ "${bin%+wire}" != "$bin" ]; then bin=${bin%+wire} lflags=(--wire) proto=wire; fi
  start_coord3 leader-cpu "$bin" "$work" "$base" "${sflags[@]}"
  l=$(curl -s "${eps[0]}/v1/status" | sed 's/.*"leader":\([0-9]*\).*/\1/')
  lp=${pids[$((l - 1))]}
  "$work/loadgen" --target coord --endpoints "${eps[$((l - 1))]}" --keys 1000 --duration 0 "${lflags[@]}" >/dev/null
  c0=$(awk '{print $14 + $15}' "/proc/$lp/stat")
  res=$("$work/loadgen" --target coord --mode "$mode" --endpoints "${eps[$((l - 1))]}" --keys 1000 --skip-load \
    --clients "$c" --duration "$duration" "${lflags[@]}" | grep -v "^#" | tail -1)
  c1=$(awk '{print $14 + $15}' "/proc/$lp/stat")
  awk -v t="$1" -v p=$proto -v m="$mode" -v c="$c" -v ticks=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
    '{printf "%s %s %s clients=%s ops=%s ops/s=%s p50_ms=%s leader_us/op=%.1f load=%s\n", t, p, m, c, $3, $4, $5, ticks * 1e6 / hz / $3, load}' <<<"$res"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"/c?
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $duration, $mode"
for r in $(seq "$rounds"); do
  for c in $clients; do
    for t in "$@"; do one "$t" "$c"; done
  done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
