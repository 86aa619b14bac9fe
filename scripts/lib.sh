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

# TLS variants of the servers (issue 10, item 6): Redis, PostgreSQL and etcd
# serving only TLS, with certificates from a throwaway CA made at test time,
# and requiring a client certificate. The server certificate names
# "localhost" and no IP address, so that the tests can check that a client
# verifies the name it dialed: the exported URLs say localhost, and the same
# server reached as 127.0.0.1 must be refused.

# make_test_ca creates, once per run, $COORD_TEST_TMP/tls with ca.crt (a
# CA valid for two days), server.crt/key (DNS:localhost) and client.crt/key
# (CN=postgres, the test servers' user), and exports COORD_TEST_TLS_DIR.
make_test_ca() {
  local d="$COORD_TEST_TMP/tls"
  export COORD_TEST_TLS_DIR="$d"
  [ -f "$d/client.crt" ] && return 0
  ensure_pkg openssl
  mkdir -p "$d"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=coord test CA" -keyout "$d/ca.key" -out "$d/ca.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  local name ext
  for name in server client; do
    ext="subjectAltName=DNS:localhost
extendedKeyUsage=serverAuth"
    [ "$name" = client ] && ext="extendedKeyUsage=clientAuth"
    local cn=localhost
    [ "$name" = client ] && cn=postgres
    openssl req "${ec[@]}" -subj "/CN=$cn" -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile <(echo "$ext") -out "$d/$name.crt" 2>/dev/null
  done
  chmod 600 "$d"/*.key
}

# tls_params prints the query parameters NAMES=ca,cert,key for the test
# CA's client files: tls_params cacert cert key.
tls_params() {
  local d="$COORD_TEST_TLS_DIR"
  echo "$1=$d/ca.crt&$2=$d/client.crt&$3=$d/client.key"
}

# start_redis_tls exports COORD_TEST_REDIS_TLS: a redis-server on a TLS port
# only, requiring client certificates.
start_redis_tls() {
  [ -n "${COORD_TEST_REDIS_TLS:-}" ] && return 0
  ensure_pkg redis-server
  make_test_ca
  local port d="$COORD_TEST_TLS_DIR"
  port=$(free_port 16479)
  mkdir -p "$COORD_TEST_TMP/redis-tls"
  start_server redis-tls "$port" redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 \
    --tls-cert-file "$d/server.crt" --tls-key-file "$d/server.key" --tls-ca-cert-file "$d/ca.crt" \
    --tls-auth-clients yes --save '' --appendonly no --dir "$COORD_TEST_TMP/redis-tls" --maxmemory-policy noeviction
  export COORD_TEST_REDIS_TLS="rediss://localhost:$port/0?$(tls_params cacert cert key)"
}

# start_postgres_tls exports COORD_TEST_POSTGRES_TLS: a second throwaway
# cluster that accepts TCP connections only over TLS and only with a client
# certificate whose CN is the user (pg_hba "cert"); the URL asks for
# sslmode=verify-full.
start_postgres_tls() {
  [ -n "${COORD_TEST_POSTGRES_TLS:-}" ] && return 0
  ensure_pkg postgresql
  make_test_ca
  local bin data port as_pg=() d="$COORD_TEST_TLS_DIR"
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  data="$COORD_TEST_TMP/postgres-tls"
  if [ "$(id -u)" -eq 0 ]; then
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    chmod 711 "$COORD_TEST_TMP"
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data"
    "${as_pg[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 \
      >"$COORD_TEST_TMP/initdb-tls.log" 2>&1 || { tail -n 20 "$COORD_TEST_TMP/initdb-tls.log" >&2; exit 1; }
    # The server reads its key only if the postgres user owns it, mode 0600.
    cp "$d/server.crt" "$d/server.key" "$d/ca.crt" "$data/"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data/server.crt" "$data/server.key" "$data/ca.crt"
    chmod 600 "$data/server.key"
    printf '%s\n' 'local all all trust' 'hostssl all all 127.0.0.1/32 cert' 'hostssl all all ::1/128 cert' >"$data/pg_hba.conf"
  fi
  port=$(free_port 15532)
  start_server postgres-tls "$port" "${as_pg[@]}" "$bin/postgres" -D "$data" -p "$port" -k "$data" \
    -c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key \
    -c ssl_ca_file=ca.crt -c fsync=off -c synchronous_commit=off -c full_page_writes=off
  export COORD_TEST_POSTGRES_TLS="postgres://postgres@localhost:$port/postgres?sslmode=verify-full&$(tls_params sslrootcert sslcert sslkey)"
}

# start_etcd_tls exports COORD_TEST_ETCD_TLS: a one-member etcd cluster whose
# client port serves only TLS and requires client certificates.
start_etcd_tls() {
  [ -n "${COORD_TEST_ETCD_TLS:-}" ] && return 0
  ensure_pkg etcd-server
  make_test_ca
  local port peer d="$COORD_TEST_TLS_DIR"
  port=$(free_port 12479)
  peer=$(free_port $((port + 1)))
  start_server etcd-tls "$port" etcd --name coord-test-tls --data-dir "$COORD_TEST_TMP/etcd-tls" \
    --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://localhost:$port" \
    --cert-file "$d/server.crt" --key-file "$d/server.key" --trusted-ca-file "$d/ca.crt" --client-cert-auth \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "coord-test-tls=http://127.0.0.1:$peer" --log-level warn \
    --heartbeat-interval 50 --election-timeout 500
  export COORD_TEST_ETCD_TLS="etcd://localhost:$port?$(tls_params cacert cert key)"
}
