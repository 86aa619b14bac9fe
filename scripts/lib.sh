# Helpers for scripts/test.sh: make sure a Debian package is installed, and
# start a server on a loopback port for the duration of the test run.
#
#   ensure_pkg redis-server                  # apt-get install it if missing
#   port=$(free_port 6379)                   # first free loopback port from 6379
#   start_server redis "$port" redis-server --port "$port" --bind 127.0.0.1
#   export COORD_TEST_REDIS="redis://127.0.0.1:$port/0"
#
# Every server started here is stopped when the calling script exits.

COORD_TEST_TMP=${COORD_TEST_TMP:-$(mktemp -d -t coord-test.XXXXXX)}
export COORD_TEST_TMP
_server_pids=()
_apt_updated=

# log prints a progress line on stderr.
log() { printf 'test.sh: %s\n' "$*" >&2; }

# as_root runs a command as root, through sudo when we are not root.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# ensure_pkg installs the named Debian packages that are not installed yet.
ensure_pkg() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  if [ -z "$_apt_updated" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    _apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# port_open reports whether something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port prints the first loopback port at or above $1 that nobody listens on.
free_port() {
  local p=$1
  while port_open "$p"; do p=$((p + 1)); done
  echo "$p"
}

# start_server NAME PORT CMD [ARGS...] starts CMD in the background, logging to
# $COORD_TEST_TMP/NAME.log, and waits up to 60 s for PORT to accept
# connections. On failure it prints the end of the log and exits.
start_server() {
  local name=$1 port=$2
  shift 2
  log "starting $name on 127.0.0.1:$port"
  "$@" >"$COORD_TEST_TMP/$name.log" 2>&1 &
  local pid=$!
  _server_pids+=("$pid")
  for _ in $(seq 600); do
    port_open "$port" && return 0
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  log "$name did not come up on port $port; its log:"
  tail -n 30 "$COORD_TEST_TMP/$name.log" >&2
  exit 1
}

# stop_servers stops every server start_server started, and removes the
# temporary directory. test.sh runs it on exit.
stop_servers() {
  for pid in "${_server_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${_server_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$COORD_TEST_TMP"
}
