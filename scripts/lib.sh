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

# The lease backends' servers (issue 7). Each start_* function installs its
# server from Debian if needed, starts it on a free loopback port under
# $COORD_TEST_TMP, and exports its URL for the tests. A variable that is
# already set (a server of your own) is left alone and nothing is started.
# Tests run the servers without fsync, for speed; COORD_SERVERS_DURABLE=1
# (scripts/bench-backends.sh) makes every write durable, as in production.

# start_redis exports COORD_TEST_REDIS: a redis-server without persistence
# (durable: every write in the append-only file, fsynced).
start_redis() {
  [ -n "${COORD_TEST_REDIS:-}" ] && return 0
  ensure_pkg redis-server
  local port
  port=$(free_port 16379)
  local persistence=(--appendonly no)
  [ -n "${COORD_SERVERS_DURABLE:-}" ] && persistence=(--appendonly yes --appendfsync always)
  start_server redis "$port" redis-server --port "$port" --bind 127.0.0.1 \
    --save '' "${persistence[@]}" --dir "$COORD_TEST_TMP" --maxmemory-policy noeviction
  export COORD_TEST_REDIS="redis://127.0.0.1:$port/0"
}

# start_etcd exports COORD_TEST_ETCD: a one-member etcd cluster.
start_etcd() {
  [ -n "${COORD_TEST_ETCD:-}" ] && return 0
  ensure_pkg etcd-server
  local port peer
  port=$(free_port 12379)
  peer=$(free_port $((port + 1)))
  start_server etcd "$port" etcd --name coord-test --data-dir "$COORD_TEST_TMP/etcd" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "coord-test=http://127.0.0.1:$peer" --log-level warn \
    --heartbeat-interval 50 --election-timeout 500 # leases as short as 1 s (minimum TTL 1.5 election timeouts)
  export COORD_TEST_ETCD="etcd://127.0.0.1:$port"
}

# start_postgres exports COORD_TEST_POSTGRES: a throwaway cluster made with
# initdb, trusting local connections, without fsync (durable: with). It
# refuses to run as root, so as root it runs as the postgres user that the
# package creates.
start_postgres() {
  [ -n "${COORD_TEST_POSTGRES:-}" ] && return 0
  ensure_pkg postgresql
  local bin data port as_pg=() nosync=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off)
  [ -n "${COORD_SERVERS_DURABLE:-}" ] && nosync=()
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  data="$COORD_TEST_TMP/postgres"
  if [ "$(id -u)" -eq 0 ]; then
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    chmod 711 "$COORD_TEST_TMP" # let postgres reach its data directory
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data"
    "${as_pg[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 \
      >"$COORD_TEST_TMP/initdb.log" 2>&1 || { tail -n 20 "$COORD_TEST_TMP/initdb.log" >&2; exit 1; }
  fi
  port=$(free_port 15432)
  start_server postgres "$port" "${as_pg[@]}" "$bin/postgres" -D "$data" -p "$port" -k "$data" \
    -c listen_addresses=127.0.0.1 "${nosync[@]}"
  export COORD_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

# start_zookeeper exports COORD_TEST_ZOOKEEPER: a standalone ZooKeeper from
# Debian's zookeeper package (not zookeeperd: no system service), run by hand
# with a config and data directory of its own under $COORD_TEST_TMP. The
# AdminServer is off (it would take port 8080); a 100 ms tick lets sessions,
# and so leases, be as short as 200 ms, and sessions may last up to 2 min.
# Every client comes from 127.0.0.1, and each Backend holds a connection per
# lease, so the per-address connection limit (60) is lifted. Its
# transaction log is not fsynced (durable: it is, before every reply).
start_zookeeper() {
  [ -n "${COORD_TEST_ZOOKEEPER:-}" ] && return 0
  ensure_pkg zookeeper
  local dir="$COORD_TEST_TMP/zookeeper" port sync=no
  [ -n "${COORD_SERVERS_DURABLE:-}" ] && sync=yes
  port=$(free_port 12181)
  mkdir -p "$dir/data"
  printf '%s\n' "dataDir=$dir/data" "clientPort=$port" "clientPortAddress=127.0.0.1" \
    "tickTime=100" "minSessionTimeout=200" "maxSessionTimeout=120000" \
    "admin.enableServer=false" "forceSync=$sync" "4lw.commands.whitelist=srvr" \
    "maxClientCnxns=0" >"$dir/zoo.cfg"
  start_server zookeeper "$port" java -Xmx512m -Dzookeeper.admin.enableServer=false \
    -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg"
  # The port opens before the server serves; srvr says when it does.
  local i
  for i in $(seq 300); do
    zookeeper_serving "$port" && break
    sleep 0.1
  done
  if ! zookeeper_serving "$port"; then
    log "zookeeper is not serving on port $port; its log:"
    tail -n 30 "$COORD_TEST_TMP/zookeeper.log" >&2
    exit 1
  fi
  export COORD_TEST_ZOOKEEPER="zk://127.0.0.1:$port"
}

# zookeeper_serving reports whether the ZooKeeper on 127.0.0.1:$1 serves.
zookeeper_serving() {
  local out
  out=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null) || return 1
  [[ $out == *"Mode: "* ]]
}
