#!/usr/bin/env bash
# The one test command: formatting, vet, and every test under the race
# detector. It installs and starts what the tests need on a fresh Debian
# machine that has only Go, and stops it all on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
source scripts/lib.sh
trap stop_servers EXIT

# Servers the tests talk to: each one is started on loopback and announced to
# the tests through an environment variable. With COORD_TEST_REQUIRE_SERVERS
# set, a test whose server is missing fails instead of skipping.
export COORD_TEST_REQUIRE_SERVERS=1
start_redis    # COORD_TEST_REDIS=redis://127.0.0.1:PORT/0
start_etcd     # COORD_TEST_ETCD=etcd://127.0.0.1:PORT
start_postgres # COORD_TEST_POSTGRES=postgres://postgres@127.0.0.1:PORT/postgres
start_zookeeper # COORD_TEST_ZOOKEEPER=zk://127.0.0.1:PORT
ensure_pkg curl # the secure cluster's test drives curl as a user would (cmd/coord)
# A real browser for the page at /ui/ and the lab's report.html (issue 18):
# Debian's Chromium, driven headless by chromedp; fonts so that the pages'
# text renders in screenshots.
ensure_pkg chromium fonts-dejavu-core
# The same servers serving only TLS, with a CA made now (issue 10, item 6).
start_redis_tls    # COORD_TEST_REDIS_TLS=rediss://localhost:PORT/0?cacert=...&cert=...&key=...
start_postgres_tls # COORD_TEST_POSTGRES_TLS=postgres://...?sslmode=verify-full&sslrootcert=...
start_etcd_tls     # COORD_TEST_ETCD_TLS=etcd://localhost:PORT?cacert=...&cert=...&key=...

log "gofmt"
unformatted=$(find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -l)
if [ -n "$unformatted" ]; then
  log "gofmt would change these files:"
  echo "$unformatted" >&2
  exit 1
fi

log "go vet"
go vet ./...

log "go test -race"
go test -race -timeout "${COORD_TEST_TIMEOUT:-15m}" ./...
