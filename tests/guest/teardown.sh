#!/bin/bash
# Issue 10: teardown under load. Each case runs while RC traffic flows
# (ib_write_bw -D, server and client in this guest), then checks that the
# kernel is up (tools/vm fails the run on any oops, WARN or BUG), that the
# device's resources (`rdma resource show`) are back where they started
# and that new traffic works:
#   kill -9 of both processes; the netdev down and up; `rdma link delete`;
#   deleting the bound netdev (a veth); rmmod (refused while in use, then
#   done once the processes are gone).
. "$(dirname "$0")/lib.sh"

# traffic DEV IP: ib_write_bw for 60 s (duration mode) on DEV to IP, in the
# background (pids in TPIDS); returns once packets flow
traffic() {
	local dev=$1 ip=$2 g i
	g=$(wait_gid "$dev" "::ffff:${ip//./\\.}")
	ib_write_bw -d "$dev" -x "$g" -D 60 >/tmp/tsrv.log 2>&1 &
	TPIDS=$!
	wait_listen 18515 || return 1
	ib_write_bw -d "$dev" -x "$g" -D 60 "$ip" >/tmp/tcli.log 2>&1 &
	TPIDS+=" $!"
	local c0 c1
	c0=$(pkts "$dev")
	for i in $(seq 100); do
		sleep 0.2
		c1=$(pkts "$dev")
		[ "$c1" -gt $((c0 + 100)) ] && return 0
	done
	echo "no traffic on $dev"
	return 1
}
# pkts DEV: packets the device sent (on the wire and device-local)
pkts() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | awk '$0 == "tx_packets" || $0 == "tx_local" { getline; s += $0 } END { print s + 0 }'
}
stop_traffic() { kill -9 $TPIDS 2>/dev/null; for p in $TPIDS; do wait "$p" 2>/dev/null; done; TPIDS=; }
# settles DEV WANT: the resources of DEV become WANT within 10 s
settles() {
	local i
	for i in $(seq 50); do
		[ "$(res_of "$1")" = "$2" ] && return 0
		sleep 0.2
	done
	echo "resources of $1: $(res_of "$1"), want $2"
	return 1
}
# works DEV IP: a short verified RC exchange
works() {
	local g
	g=$(wait_gid "$1" "::ffff:${2//./\\.}") || return 1
	pingpong "" "" "$2" ibv_rc_pingpong -d "$1" -g "$g" -n 100 -s 4096 >/dev/null
}

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
base=$(res_of fr0)
echo "resources at the start: $base"

# 1. kill -9 of both processes mid-traffic
check "traffic on fr0" traffic fr0 10.0.2.15
stop_traffic
check "kill -9 mid-traffic: resources back to the start" settles fr0 "$base"
check "  ...new traffic works" works fr0 10.0.2.15

# 2. the netdev goes down and up under traffic
check "traffic on fr0" traffic fr0 10.0.2.15
ip link set eth0 down
sleep 2
ip link set eth0 up
sleep 2
stop_traffic
ip route add default via 10.0.2.2 2>/dev/null
check "netdev down/up mid-traffic: resources back" settles fr0 "$base"
check "  ...port active again" bash -c 'for i in $(seq 50); do ibv_devinfo -d fr0 | grep -q PORT_ACTIVE && exit 0; sleep 0.2; done; exit 1'
check "  ...new traffic works" works fr0 10.0.2.15

# 3. rdma link delete under traffic: unregistering waits for the processes'
# verbs files (the core's rule for devices that do not disassociate), so the
# processes are killed meanwhile; the delete must then complete
check "traffic on fr0" traffic fr0 10.0.2.15
timeout 60 rdma link delete fr0 &
dpid=$!
sleep 3
stop_traffic
wait $dpid
check "rdma link delete mid-traffic completes" test $? = 0
check_fails "  ...fr0 gone" test -e /sys/class/infiniband/fr0
check "  ...rdma link add fr0 again" rdma link add fr0 type ferroce netdev eth0
check "  ...new traffic works" works fr0 10.0.2.15

# 4. the bound netdev is deleted under traffic (a veth pair, both ends here)
ip link add vx type veth peer name vy
ip addr add 10.77.0.1/24 dev vx
ip link set vx up
ip link set vy up
check "rdma link add fr1 on veth vx" rdma link add fr1 type ferroce netdev vx
check "traffic on fr1" traffic fr1 10.77.0.1
ip link del vx &
lpid=$!
sleep 3
stop_traffic
wait $lpid
check "  ...ip link del vx completes" test $? = 0
check "bound netdev deleted: fr1 goes away" bash -c 'for i in $(seq 100); do [ -e /sys/class/infiniband/fr1 ] || exit 0; sleep 0.2; done; exit 1'
check "  ...fr0 untouched: new traffic works" works fr0 10.0.2.15

# 5. rmmod under traffic: refused while processes hold the device, done
# once they are gone
check "traffic on fr0" traffic fr0 10.0.2.15
check_fails "rmmod refused while processes use ferroce" rmmod ferroce
stop_traffic
check "rmmod after the processes are gone" bash -c 'for i in $(seq 50); do rmmod ferroce 2>/dev/null && exit 0; sleep 0.2; done; rmmod ferroce'
check_fails "  ...no ferroce devices left" bash -c 'ls /sys/class/infiniband/ 2>/dev/null | grep -q "^fr"'
check "  ...the module loads again, fr0 works" bash -c 'rdma link add fr0 type ferroce netdev eth0'
check "  ...new traffic works" works fr0 10.0.2.15
check "rdma link delete fr0" rdma link delete fr0
finish
