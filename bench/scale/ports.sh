# ports.sh: sourced by compare.sh, catchup.sh and leader-cpu.sh.
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
