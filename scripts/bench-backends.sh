#!/usr/bin/env bash
# The lease backends' figures for docs/BENCHMARKS.md, in one run: starts
# Redis, etcd, PostgreSQL and ZooKeeper on loopback with durable writes (as
# scripts/test.sh does, installing them on a fresh Debian machine), then
#   coord bench latency  - acquire/renew/release beside each store's plain round trip
#   coord bench failover - the leaderless gap after SIGKILL and SIGTERM, per store
# Usage: scripts/bench-backends.sh [TRIALS] [ITERATIONS]   (default 20, 500)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
source scripts/lib.sh
trap stop_servers EXIT
trials=${1:-20}
iterations=${2:-500}

export COORD_SERVERS_DURABLE=1
start_redis
start_etcd
start_postgres
start_zookeeper
bin="$COORD_TEST_TMP/coord"
go build -o "$bin" ./cmd/coord

sqlite="sqlite://$COORD_TEST_TMP/leases.db"
file="file://$COORD_TEST_TMP/leader.lock"
stores=("$sqlite" "$COORD_TEST_REDIS" "$COORD_TEST_POSTGRES" "$COORD_TEST_ETCD" "$COORD_TEST_ZOOKEEPER" "$file")
args=()
for s in "${stores[@]}"; do args+=(--store "$s"); done
"$bin" bench latency --iterations "$iterations" "${args[@]}"
echo

# TTL 2 s: short enough for many trials, a whole number of seconds for etcd.
for s in "$sqlite" "$COORD_TEST_REDIS" "$COORD_TEST_POSTGRES" "$COORD_TEST_POSTGRES&advisory=true" "$COORD_TEST_ETCD" "$COORD_TEST_ZOOKEEPER"; do
  echo "== $s"
  "$bin" bench failover --store "$s" --ttl 2s --trials "$trials" --baseline-trials 0
  echo
done
