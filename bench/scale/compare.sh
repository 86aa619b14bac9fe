#!/usr/bin/env bash
# compare.sh: coord and etcd side by side, interleaved, on this machine
# (issue 21). Each round starts a fresh 3-node cluster of each system on
# loopback, runs loadgen against it (a load of --keys keys, then a steady
# phase of random overwrites), and stops it. The figures in
# docs/BENCHMARKS.md ("The state machine at scale") come from it.
#
#   bench/scale/compare.sh KEYS ROUNDS DURATION [COORD_BINARY...]
#   bench/scale/compare.sh 100000 2 20s /tmp/coord /tmp/coord-main
#
# Every COORD_BINARY (default: coord on PATH) runs as its own target, so a
# build can be compared with an earlier one. etcd is Debian's etcd-server.
# LOADGEN_ARGS are passed on to loadgen; for the lease renewals:
#
#   LOADGEN_ARGS="--mode leases --leases 10000 --renew-every 3s" bench/scale/compare.sh 0 1 30s ...
#
# and for 1,000 watchers of one key under 5,000 background writes/s to
# KEYS other keys (no load phase in that mode):
#
#   LOADGEN_ARGS="--mode watch --watchers 1000 --rate 5000" bench/scale/compare.sh 10000 1 20s ...
#
# A COORD_BINARY may carry server flags after it, in one quoted word
# ("/tmp/coord --snapshot-log-percent 30"), shown on its "# leader"
# line, and loadgen flags of its own after " -- " ("/tmp/coord -- --spread":
# that target's clients send their requests to every member in turn,
# client.Config.Spread). Each coord phase reports the snapshots each
# server started in it ("# steady: snapshots started per server"), from its
# data directory. COMPARE_ETCD=0 leaves etcd out (coord builds A/B only).
#
# etcd's client balances its requests round robin over the endpoints it is
# given, coord's follows the leader. COMPARE_ETCD_LEADER_ONLY=1 gives etcd's
# client the leader's endpoint only (found with etcdctl endpoint status;
# the watchers of --mode watch stay spread over all three), so that both
# systems run with the same client behaviour: coord by default against
# etcd leader-only, coord with " -- --spread" against etcd by default.
# COMPARE_ETCD_LEADER_ONLY=both runs etcd both ways in every round,
# balanced first.
set -euo pipefail
keys=${1:-100000} rounds=${2:-1} duration=${3:-20s}
shift 3 || true
binaries=("$@")
[ ${#binaries[@]} -eq 0 ] && binaries=(coord)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
(cd "$here" && go build -o "$work/loadgen" ./loadgen)
base=${COMPARE_PORT_BASE:-27100}
. "$here/ports.sh"
check_port_base COMPARE_PORT_BASE "$base" 33
if [ "${COMPARE_ETCD:-1}" != 0 ] && ! { command -v etcd && command -v etcdctl; } >/dev/null; then
  # Debian ships etcdctl apart from the server (etcd-client); without it the
  # health wait below would never end.
  source "$here/../../scripts/lib.sh"
  ensure_pkg etcd-server etcd-client
fi

run_coord() { # "binary [server flags...] [-- loadgen flags...]"
  local spec=$1 bin flags lgflags="" peers="" pids=() eps=() dirs=()
  if [[ $spec == *" -- "* ]]; then lgflags=${spec#* -- }; spec=${spec%% -- *}; fi
  read -r bin flags <<<"$spec"
  for i in 1 2 3; do peers+="$i=127.0.0.1:$((base + i)),"; done
  for i in 1 2 3; do
    # shellcheck disable=SC2086 # $flags is split into the server's flags
    "$bin" server --insecure --id $i --peers "${peers%,}" --http 127.0.0.1:$((base + 10 + i)) \
      --data "$work/coord-$i" --log-level error $flags >>"$work/coord.log" 2>&1 &
    pids+=($!)
    eps+=(http://127.0.0.1:$((base + 10 + i)))
    dirs+=("$work/coord-$i")
  done
  until curl -sf "${eps[0]}/v1/status" | grep -q '"leader":[1-9]'; do
    kill -0 "${pids[@]}" 2>/dev/null || { echo "compare: $bin did not start; see $work/coord.log" >&2; tail -3 "$work/coord.log" >&2; exit 1; }
    sleep 0.2
  done
  echo "# leader: node $(curl -s "${eps[0]}/v1/status" | sed 's/.*"leader":\([0-9]*\).*/\1/') of ${pids[*]}${flags:+ (server flags: $flags)}${lgflags:+ (loadgen flags: $lgflags)}"
  # shellcheck disable=SC2086 # LOADGEN_ARGS and $lgflags are split into flags
  "$work/loadgen" --target coord --endpoints "$(IFS=,; echo "${eps[*]}")" --keys "$keys" \
    --duration "$duration" --pids "$(IFS=,; echo "${pids[*]}")" --data-dirs "$(IFS=,; echo "${dirs[*]}")" \
    ${LOADGEN_ARGS:-} $lgflags | sed "s|^coord |$(basename "$bin")${lgflags:+ $lgflags} |"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"/coord-*
}

run_etcd() { # [leader-only]
  local leader_only=${1:-} cluster="" pids=() eps=() requests=() label=etcd
  for i in 1 2 3; do cluster+="e$i=http://127.0.0.1:$((base + 20 + i)),"; done
  for i in 1 2 3; do
    etcd --name e$i --data-dir "$work/etcd-$i" --log-level error \
      --listen-client-urls http://127.0.0.1:$((base + 30 + i)) --advertise-client-urls http://127.0.0.1:$((base + 30 + i)) \
      --listen-peer-urls http://127.0.0.1:$((base + 20 + i)) --initial-advertise-peer-urls http://127.0.0.1:$((base + 20 + i)) \
      --initial-cluster "${cluster%,}" 2>>"$work/etcd.log" &
    pids+=($!)
    eps+=(127.0.0.1:$((base + 30 + i)))
  done
  until ETCDCTL_API=3 etcdctl --endpoints "${eps[0]}" endpoint health >/dev/null 2>&1; do
    kill -0 "${pids[@]}" 2>/dev/null || { echo "compare: etcd did not start; see $work/etcd.log" >&2; tail -3 "$work/etcd.log" >&2; exit 1; }
    sleep 0.2
  done
  requests=("${eps[@]}")
  if [ -n "$leader_only" ]; then
    # The simple format's fifth field is IS LEADER.
    requests=("$(ETCDCTL_API=3 etcdctl --endpoints "$(IFS=,; echo "${eps[*]}")" endpoint status | awk -F', ' '$5 == "true" { print $1 }')")
    [ -n "${requests[0]}" ] || { echo "compare: no etcd endpoint says it leads" >&2; exit 1; }
    label=etcd-leader
    echo "# etcd leader: ${requests[0]}; its client is given that endpoint only"
  fi
  # shellcheck disable=SC2086 # LOADGEN_ARGS is split into flags
  "$work/loadgen" --target etcd --endpoints "$(IFS=,; echo "${eps[*]}")" --request-endpoints "$(IFS=,; echo "${requests[*]}")" \
    --keys "$keys" --duration "$duration" --pids "$(IFS=,; echo "${pids[*]}")" ${LOADGEN_ARGS:-} | sed "s|^etcd  |$label  |"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$work"/etcd-*
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $keys keys, $rounds rounds, steady $duration"
for r in $(seq "$rounds"); do
  for b in "${binaries[@]}"; do run_coord "$b"; done
  [ "${COMPARE_ETCD:-1}" = 0 ] && continue
  case ${COMPARE_ETCD_LEADER_ONLY:-0} in
  0) run_etcd ;;
  1) run_etcd leader-only ;;
  both) run_etcd; run_etcd leader-only ;;
  *) echo "compare: COMPARE_ETCD_LEADER_ONLY=${COMPARE_ETCD_LEADER_ONLY}: want 0, 1 or both" >&2; exit 2 ;;
  esac
done
