#!/usr/bin/env bash
# bulkload.sh: the bulk load rate of single writes against atomic batches
# (POST /v1/batch), the same binary, side by side (issue 21). Each round
# runs every SPEC in turn, each on a fresh 3-node cluster on loopback
# (--insecure): loadgen loads KEYS keys of VALUE_BYTES and prints its load
# line (ops and ops/s count keys; the latencies are per request: per batch
# when batching), with the servers' peak RSS and the CPU they used.
#
#   bench/scale/bulkload.sh KEYS VALUE_BYTES ROUNDS SPEC...
#   COORD_BINARY=/tmp/coord bench/scale/bulkload.sh 200000 256 3 1:256 100:64 1000:16
#
# A SPEC is BATCH:CLIENTS[:BINARY]: keys per request (1: one PUT a key,
# the harness's bulk load before batches), concurrent requests (over 4
# client sessions), and the binary to run (default COORD_BINARY, else
# coord on PATH), so that a build without batches can run the single
# writes beside it:
#
#   COORD_BINARY=/tmp/coord bench/scale/bulkload.sh 200000 256 3 1:256 1000:8 1:256:/tmp/coord-main
#
# SERVER_ARGS are passed on to every server.
set -euo pipefail
keys=${1:?KEYS} value=${2:?VALUE_BYTES} rounds=${3:?ROUNDS}
shift 3
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(1:256 1000:16)
bin=${COORD_BINARY:-coord}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$here" && go build -o "$work/loadgen" ./loadgen)
base=${BULKLOAD_PORT_BASE:-28600}
. "$here/ports.sh"
check_port_base BULKLOAD_PORT_BASE "$base" 13

run() { # batch clients binary
  local batch=$1 clients=$2 bin=$3 peers="" pids=() eps=()
  for i in 1 2 3; do peers+="$i=127.0.0.1:$((base + i)),"; done
  for i in 1 2 3; do
    "$bin" server --insecure --id $i --peers "${peers%,}" --http 127.0.0.1:$((base + 10 + i)) \
      --data "$work/coord-$i" --log-level error ${SERVER_ARGS:-} >>"$work/coord.log" 2>&1 &
    pids+=($!)
    eps+=(http://127.0.0.1:$((base + 10 + i)))
  done
  until curl -sf "${eps[0]}/v1/status" | grep -q '"leader":[1-9]'; do
    kill -0 "${pids[@]}" 2>/dev/null || { echo "bulkload: $bin did not start; see $work/coord.log" >&2; tail -3 "$work/coord.log" >&2; exit 1; }
    sleep 0.2
  done
  "$work/loadgen" --target coord --endpoints "$(IFS=,; echo "${eps[*]}")" --keys "$keys" --value-bytes "$value" \
    --duration 0 --batch "$batch" --clients "$clients" --sessions 4 --pids "$(IFS=,; echo "${pids[*]}")" |
    grep -v '^target' | sed "s|^coord |$(basename "$bin") batch=$batch clients=$clients |"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"/coord-*
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $keys keys of $value bytes, $rounds rounds"
echo "# binary spec                    phase     keys     keys/s    p50 ms    p99 ms    max ms    rss MB     cpu s"
for r in $(seq "$rounds"); do
  for s in "${specs[@]}"; do
    IFS=: read -r batch clients sbin <<<"$s"
    run "$batch" "$clients" "${sbin:-$bin}"
  done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
