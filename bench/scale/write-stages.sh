#!/usr/bin/env bash
# write-stages.sh: where a single-client write's time goes, stage by
# stage, on real processes (issue 15).
#
# Starts a 3-node cluster of COORD (--insecure, loopback, fsync on), loads
# 1000 keys, runs one wire client's writes through the leader
# (bench/scale/loadgen --clients 1 --wire --mode writes) and, in the middle
# of the run, records SECONDS of the servers' and the client's syscalls
# with timestamps (perf trace: reads, writes, sendmsg, pwrite64,
# fdatasync). write-stages.py then follows each request from the client's
# write to its read of the answer, hop by hop, and prints the median of
# each stage. perf trace slows every syscall a little: compare builds
# side by side, not with untraced runs.
#
#   bench/scale/write-stages.sh COORD [SECONDS]      # default 4
#
# PORT_BASE (default 27200) is the first port tried. DATA (default: the
# work directory) holds the servers' data directories; DATA=/dev/shm takes
# the disk out, leaving the software's share of each stage.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../scripts/lib.sh
source "$root/scripts/lib.sh"
coord=${1:?coord binary} seconds=${2:-4}
command -v perf >/dev/null || { echo "write-stages: needs perf (linux-perf)" >&2; exit 2; }
work=$(mktemp -d -t write-stages.XXXXXX)
data=$(mktemp -d -p "${DATA:-$work}" write-stages-data.XXXXXX)
pids=()
cleanup() {
  [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work" "$data"
}
trap cleanup EXIT
(cd "$root/bench/scale" && go build -o "$work/loadgen" ./loadgen)

ports=() next=${PORT_BASE:-27200}
while [ ${#ports[@]} -lt 6 ]; do
  next=$(free_port "$next")
  ports+=("$next")
  next=$((next + 1))
done
peers=""
for i in 1 2 3; do peers+="$i=127.0.0.1:${ports[i - 1]},"; done
for i in 1 2 3; do
  "$coord" server --insecure --id "$i" --peers "${peers%,}" --http "127.0.0.1:${ports[i + 2]}" \
    --data "$data/d$i" --log-level error >>"$work/coord.log" 2>&1 &
  pids+=($!)
done
leader=""
for _ in $(seq 300); do
  for i in 1 2 3; do
    if curl -sf "http://127.0.0.1:${ports[i + 2]}/v1/status" | grep -q '"role":"leader"'; then leader=$i; fi
  done
  [ -n "$leader" ] && break
  sleep 0.2
done
[ -n "$leader" ] || { echo "write-stages: no leader; see $work/coord.log" >&2; exit 1; }
ep="http://127.0.0.1:${ports[leader + 2]}"
"$work/loadgen" --endpoints "$ep" --keys 1000 --duration 0 >/dev/null
"$work/loadgen" --endpoints "$ep" --keys 1000 --skip-load --clients 1 --mode writes --wire \
  --duration "$((seconds + 5))s" >"$work/loadgen.out" &
lg=$!
sleep 2
for p in "${pids[@]}"; do ls "/proc/$p/task" | sed "s/\$/ $p/"; done >"$work/tids"
timeout -s INT "$seconds" perf trace -T -p "$(IFS=,; echo "${pids[*]},$lg")" \
  -e 'fdatasync,write,read,pwrite64,sendmsg' -o "$work/trace" 2>/dev/null || true
wait "$lg"
echo "# $coord, data under ${DATA:-the work directory}, leader node $leader, load $(cut -d' ' -f1-3 /proc/loadavg); the traced run:"
grep -E '^coord +steady ' "$work/loadgen.out"
python3 "$root/bench/scale/write-stages.py" "$work/trace" "$work/tids" "${pids[leader - 1]}"
