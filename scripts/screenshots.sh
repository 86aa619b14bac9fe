#!/usr/bin/env bash
# Remakes the README's pictures in docs/img from the tests that take them in
# a real browser: the page at /ui/ of a 3-node cluster after its leader was
# killed (server/localcluster, TestUIFollowsTheClusterInABrowser), and a
# chart of the lab's report.html (cmd/coord,
# TestLabReportChartsLoadInABrowser). Installs Chromium if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
source scripts/lib.sh
ensure_pkg chromium fonts-dejavu-core
shots=$(mktemp -d)
trap 'rm -rf "$shots" "$COORD_TEST_TMP"' EXIT
export COORD_SCREENSHOTS=$shots COORD_TEST_REQUIRE_SERVERS=1
go test ./server/localcluster/ -run '^TestUIFollowsTheClusterInABrowser$' -count=1
go test ./cmd/coord/ -run '^TestLabReportChartsLoadInABrowser$' -count=1
mkdir -p docs/img
cp "$shots/ui.png" docs/img/ui.png
cp "$shots/lab-chart.png" docs/img/lab-chart.png
log "wrote docs/img/ui.png and docs/img/lab-chart.png"
