# ports.sh: sourced by the scale scripts (compare.sh, catchup.sh,
# leader-cpu.sh, follower-cpu.sh, ...).
#
# check_port_base NAME BASE SPAN refuses a port base whose ports (BASE+1 to
# BASE+SPAN) reach below 1024 or into the kernel's ephemeral range
# (net.ipv4.ip_local_port_range, 32768 by default), where the local end of
# any outgoing connection on the machine may already hold one of them and
# a node would fail to listen. The defaults (27100, 27700, 28400) lie below it and
# clear of scripts/lib.sh's test servers (12181, 12379, 15432, 16379 and
# up).
check_port_base() {
  local name=$1 base=$2 span=$3 ephemeral
  ephemeral=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  if ! [[ $base =~ ^[0-9]+$ ]] || [ "$base" -lt 1023 ] || [ $((base + span)) -ge "$ephemeral" ]; then
    echo "$name=$base: want 1023 to $((ephemeral - span - 1)), so that ports $name+1 to $name+$span stay below the ephemeral ports from $ephemeral" >&2
    exit 2
  fi
}

# start_coord3 SCRIPT BIN WORK BASE [SERVER_FLAG...] starts a 3-node
# --insecure cluster of BIN on loopback (peers on BASE+1 to BASE+3, HTTP
# on BASE+11 to BASE+13, data in WORK/c1 to WORK/c3, logs appended to
# WORK/log) and waits until node 1 knows a leader. It sets the caller's
# arrays pids and eps (the nodes' process IDs and API endpoints, node i
# at index i-1), and exits, naming SCRIPT, if a node ends before then.
start_coord3() {
  local script=$1 bin=$2 work=$3 base=$4 peers="" i
  shift 4
  pids=() eps=()
  for i in 1 2 3; do peers+="$i=127.0.0.1:$((base + i)),"; done
  for i in 1 2 3; do
    "$bin" server --insecure --id $i --peers "${peers%,}" --http 127.0.0.1:$((base + 10 + i)) \
      --data "$work/c$i" --log-level error "$@" >>"$work/log" 2>&1 &
    pids+=($!) eps+=(http://127.0.0.1:$((base + 10 + i)))
  done
  until curl -sf "${eps[0]}/v1/status" | grep -q '"leader":[1-9]'; do
    kill -0 "${pids[@]}" 2>/dev/null || { echo "$script: $bin did not start; see $work/log" >&2; tail -3 "$work/log" >&2; exit 1; }
    sleep 0.2
  done
}
