#!/usr/bin/env bash
# catchup.sh: how a follower that lost everything catches up by snapshot
# at large key counts (issue 21). For each COORD_BINARY in turn: start a
# 3-node cluster on loopback (--insecure), load KEYS keys of VALUE_BYTES
# with loadgen, then kill follower 3, empty its data directory, restart it
# with --join, and time until it has applied the leader's commit index as
# of the restart. Prints, per binary: the load, the catch-up time, the
# snapshot's size on the leader, the restarted follower's peak RSS
# (VmHWM), the leader's peak RSS during the catch-up (sampled every
# 100 ms) and its peak over its life, and the follower's restore line.
#
#   bench/scale/catchup.sh KEYS VALUE_BYTES [COORD_BINARY...]
#   bench/scale/catchup.sh 200000 256 /tmp/coord /tmp/coord-main
#
# (A follower restarted on an emptied data directory is not a way to do
# this: coord refuses to let a voter that lost acknowledged entries vote
# or apply, docs/storage.md.)
#
# SERVER_ARGS are passed on to every server. A snapshot holds the state as
# of the last one taken (every --snapshot-entries, 10,000 by default), so
# to send a snapshot past a size, load enough past it; for one over 1 GiB
# (the old design's bound) with few, large values:
#
#   SERVER_ARGS="--snapshot-entries 600" bench/scale/catchup.sh 1300 1000000 ...
#
# LOAD_ARGS are passed on to loadgen (default: --clients 256 --sessions 4,
# a bulk load: 256 concurrent writes over 4 sessions, each with its
# connections kept alive). The catch-up line also gives the CPU seconds the
# new member and the leader used during the catch-up.
#
# CATCHUP_TIMEOUT (seconds, default 600) bounds the wait; a member that
# has not caught up by then is reported as such (the old design refuses a
# snapshot over 1 GiB, and retries forever).
set -euo pipefail
keys=${1:-100000} value=${2:-256}
shift 2 || true
binaries=("$@")
[ ${#binaries[@]} -eq 0 ] && binaries=(coord)
timeout=${CATCHUP_TIMEOUT:-600}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${CATCHUP_KEEP:-}" ] || rm -rf "$work"' EXIT
(cd "$here" && go build -o "$work/loadgen" ./loadgen)
base=${CATCHUP_PORT_BASE:-27700}
. "$here/ports.sh"
check_port_base CATCHUP_PORT_BASE "$base" 14

cpu() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; } # utime+stime, USER_HZ 100
rss() { awk -v k="$2" '$1==k":" {print int($2/1024)}' "/proc/$1/status" 2>/dev/null || echo 0; }
status() { curl -sf "http://127.0.0.1:$((base + 10 + $1))/v1/status" || true; }
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

run() { # binary
  local bin=$1 peers="" pids=() eps=()
  for i in 1 2 3; do peers+="$i=127.0.0.1:$((base + i)),"; done
  peers=${peers%,}
  start() { # id [--join]
    "$bin" server --insecure --id "$1" --peers "$peers" --http 127.0.0.1:$((base + 10 + $1)) \
      --data "$work/coord-$1" ${SERVER_ARGS:-} "${@:2}" >>"$work/coord-$1.log" 2>&1 &
    pids[$1]=$!
  }
  for i in 1 2 3; do start $i; eps+=(http://127.0.0.1:$((base + 10 + i))); done
  until status 1 | grep -q '"leader":[1-9]'; do sleep 0.2; done
  "$work/loadgen" --target coord --endpoints "$(IFS=,; echo "${eps[*]}")" --keys "$keys" --value-bytes "$value" \
    --duration 0 ${LOAD_ARGS:---clients 256 --sessions 4} --pids "${pids[1]},${pids[2]},${pids[3]}" | sed "s|^coord |$(basename "$bin") |"
  local leader
  leader=$(status 1 | field leader)
  local victim=4 commit snap_bytes
  commit=$(status "$leader" | field commit)
  snap_bytes=$(du -cb "$work/coord-$leader"/snap/*.snap 2>/dev/null | tail -1 | cut -f1 || true)
  local t0 t1 peak=0 applied=0 now r
  t0=$(date +%s.%N)
  local leader_cpu0
  leader_cpu0=$(cpu "${pids[$leader]}")
  peers+=",4=127.0.0.1:$((base + 4))"
  start 4 --join
  curl -sf -m "$timeout" -X POST -d "{\"id\":4,\"peer\":\"127.0.0.1:$((base + 4))\"}" \
    "http://127.0.0.1:$((base + 10 + leader))/v1/members" >/dev/null &
  while :; do
    r=$(rss "${pids[$leader]}" VmRSS); [ "$r" -gt "$peak" ] && peak=$r
    applied=$(status $victim | field applied); applied=${applied:-0}
    [ "$applied" -ge "$commit" ] && break
    now=$(date +%s.%N)
    if [ "$(echo "$now - $t0 > $timeout" | bc)" = 1 ]; then
      echo "$(basename "$bin"): follower $victim NOT caught up after ${timeout}s (applied $applied of $commit)"
      grep -m3 -i "snapshot" "$work/coord-$victim.log" "$work/coord-$leader.log" | tail -3 || true
      break
    fi
    sleep 0.1
  done
  t1=$(date +%s.%N)
  printf '%s catch-up: %d keys of %d B, snapshot %d MB, commit %d, %.2f s; follower peak RSS %d MB; leader RSS peak %d MB during, %d MB lifetime; CPU during: follower %.1f s, leader %.1f s\n' \
    "$(basename "$bin")" "$keys" "$value" $((snap_bytes / 1000000)) "$commit" "$(echo "$t1 - $t0" | bc)" \
    "$(rss "${pids[$victim]}" VmHWM)" "$peak" "$(rss "${pids[$leader]}" VmHWM)" \
    "$(cpu "${pids[$victim]}")" "$(echo "$(cpu "${pids[$leader]}") - $leader_cpu0" | bc)"
  grep -h "restored from a snapshot" "$work/coord-$victim.log" | tail -1 || true
  kill "${pids[1]}" "${pids[2]}" "${pids[3]}" "${pids[4]}" 2>/dev/null; wait 2>/dev/null || true
  [ -n "${CATCHUP_KEEP:-}" ] || rm -rf "$work"/coord-*
}

echo "# work $work"
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $keys keys of $value bytes"
for b in "${binaries[@]}"; do run "$b"; done
