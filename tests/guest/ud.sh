#!/bin/bash
# Issue 4: the UD datapath. ibv_ud_pingpong and perftest UD on one ferroce
# device (loopback through the guest's own addresses), two devices on a veth
# pair across network namespaces with a tshark capture, the UD rules of the
# IBTA seen from outside (userspace/tests/ud_rules.c), bad verbs input, and
# UD multicast (userspace/tests/mcast.c on one device over IPv4 and IPv6,
# mckey between the namespaces), UD and UC QPs on SRQs (srq_ud.c) and
# completion vectors (comp_vector.c).
. "$(dirname "$0")/lib.sh"

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G4=$(gid_index fr0 '::ffff:10\.0\.2\.15')
G6=$(gid_index fr0 'fd00::15')
echo "GID indices: IPv4 $G4, IPv6 $G6"
info=$(ibv_devinfo -v -d fr0)
expect "query_device reports UD QPs" 'max_qp:[[:space:]]+[1-9]' "$info"
expect "query_device reports SRQs" 'max_srq:[[:space:]]+[1-9]' "$info"

check "ibv_ud_pingpong: 1000 messages of 1024 bytes over IPv4 GIDs" \
	pingpong "" "" 10.0.2.15 ibv_ud_pingpong -d fr0 -g "$G4" -n 1000 -s 1024
expect "  ...1000 iterations" '^1000 iters in' "$(cat /tmp/cli.log)"
# (the pingpong's own TCP exchange is IPv4; the RDMA traffic uses the GIDs)
check "ibv_ud_pingpong: 200 messages over IPv6 GIDs" \
	pingpong "" "" 10.0.2.15 ibv_ud_pingpong -d fr0 -g "$G6" -n 200 -s 1024

check "ib_send_bw -c UD (1000 iterations at 1024 bytes)" \
	pingpong "" "" 10.0.2.15 ib_send_bw -d fr0 -x "$G4" -c UD -n 1000 -s 1024
expect "  ...every iteration counted" '^ *1024 +1000 ' "$(cat /tmp/cli.log)"
check "ib_send_lat -c UD (500 iterations at 2 bytes)" \
	pingpong "" "" 10.0.2.15 ib_send_lat -d fr0 -x "$G4" -c UD -n 500 -s 2
expect "  ...every iteration counted" '^ *2 +500 ' "$(cat /tmp/cli.log)"

# The IBTA's UD rules seen from outside, and bad verbs input. Without
# default routes, documentation addresses are unreachable.
ip route del default 2>/dev/null
ip -6 route flush default 2>/dev/null
check "UD rules and bad input over IPv4 (ud_rules)" build/userspace/tests/ud_rules fr0 "$G4"
check "UD rules and bad input over IPv6 (ud_rules)" build/userspace/tests/ud_rules fr0 "$G6"
check "UD and UC QPs on shared receive queues (srq_ud)" build/userspace/tests/srq_ud fr0 "$G4"

# Completion vectors: one per possible CPU, each CQ's handler run on its
# vector's CPU. The program runs pinned to another CPU than the vector's,
# and ftrace shows where the RDMA core's handler of a process's CQ
# (ib_uverbs_comp_handler) ran.
possible=$(cat /sys/devices/system/cpu/possible)
vectors=$(( ${possible##*-} + 1 ))
check "a UD datagram through a CQ on every vector (comp_vector, $vectors vectors)" \
	build/userspace/tests/comp_vector fr0 "$G4" "$vectors" -1 20
T=/sys/kernel/tracing
# only_on COUNTS CPU: `uniq -c`'s COUNTS name CPU alone, 50 times or more.
only_on() { [ "$(wc -l <<<"$1")" -eq 1 ] && grep -Eq "^ *([5-9][0-9]|[1-9][0-9]{2,}) 0*$2\$" <<<"$1"; }
[ -e $T/trace ] || mount -t tracefs nodev $T
if echo ib_uverbs_comp_handler >$T/set_ftrace_filter 2>/dev/null && echo function >$T/current_tracer; then
	last=$(( vectors < 2 ? 0 : 1 ))
	for v in $(seq 0 $last); do
		for pin in $(seq 0 $last); do
			echo >$T/trace
			echo 1 >$T/tracing_on
			check "a CQ on vector $v, its process on CPU $pin (comp_vector)" \
				taskset -c "$pin" build/userspace/tests/comp_vector fr0 "$G4" "$vectors" "$v" 50
			echo 0 >$T/tracing_on
			cpus=$(sed -n 's/.*\[\([0-9]*\)\].* ib_uverbs_comp_handler.*/\1/p' $T/trace | sort | uniq -c)
			echo "ib_uverbs_comp_handler calls by CPU:"; echo "$cpus"
			check "vector $v's handler ran on CPU $v only (process on CPU $pin), at least 50 times" \
				only_on "$cpus" "$v"
		done
	done
	echo nop >$T/current_tracer
	echo >$T/set_ftrace_filter
else
	check "ftrace can trace ib_uverbs_comp_handler (for the vector checks)" false
fi
check "UD multicast on one device over IPv4 (mcast, group 239.1.2.3)" build/userspace/tests/mcast fr0 "$G4" 239.1.2.3
check "UD multicast on one device over IPv6 (mcast, group ff0e::1:2:3)" build/userspace/tests/mcast fr0 "$G6" ff0e::1:2:3
stats=$(rdma statistic show link fr0/1)
echo "$stats"
expect "drops counted (Q_Key mismatch, length)" 'rx_drop_transport [1-9]' "$stats"
expect "  ...the Q_Key mismatches by their reason (rx_qp_bad_key)" 'rx_qp_bad_key [1-9]' "$stats"
expect "  ...the datagrams too long for their receive by theirs (rx_qp_length)" 'rx_qp_length [1-9]' "$stats"

# Two devices on a veth pair whose ends live in two namespaces.
veth_namespaces
check "device in namespace a" ip netns exec a rdma link add fra type ferroce netdev va
check "device in namespace b" ip netns exec b rdma link add frb type ferroce netdev vb
sleep 1
GA=$(gid_index fra '::ffff:10\.66\.0\.1')
GB=$(gid_index frb '::ffff:10\.66\.0\.2')
ip netns exec a tshark -q -i va -f 'udp port 4791' -w /tmp/ud.pcap >/tmp/tshark.log 2>&1 &
tpid=$!
for i in $(seq 100); do grep -q Capturing /tmp/tshark.log && break; sleep 0.2; done
# ibv_ud_pingpong between the namespaces: server on frb in b, client on fra in a
ip netns exec b timeout 120 ibv_ud_pingpong -d frb -g "$GB" -n 100 -s 512 >/tmp/srv.log 2>&1 &
spid=$!
wait_listen 18515 b
ip netns exec a timeout 120 ibv_ud_pingpong -d fra -g "$GA" -n 100 -s 512 10.66.0.2 >/tmp/cli.log 2>&1
c=$?
wait $spid
s=$?
cat /tmp/cli.log /tmp/srv.log
check "ibv_ud_pingpong between two namespaces over veth (client)" test $c = 0
check "  ...(server)" test $s = 0
sleep 1
kill -INT $tpid
wait $tpid
qa=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\).*/\1/p' /tmp/cli.log)
qb=$(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\).*/\1/p' /tmp/srv.log)
fields=$(tshark -r /tmp/ud.pcap -T fields -E separator=' ' -e ip.src -e infiniband.bth.opcode -e infiniband.bth.destqp \
	-e infiniband.deth.q_key -e infiniband.deth.srcqp -e infiniband.bth.psn -e _ws.malformed -e _ws.expert.severity 2>/dev/null)
echo "$fields" | head -5
npk=$(echo "$fields" | grep -c .)
echo "$npk packets captured; client QPN $qa, server QPN $qb"
check "tshark captured the exchange (>= 200 packets)" test "$npk" -ge 200
bad=$(echo "$fields" | awk -v qa=$((qa)) -v qb=$((qb)) '
	function h(s,  i, v) { s = tolower(s); sub(/^0x/, "", s); v = 0
		for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
		return v }
	# opcode 100 = UD SEND only; Q_Key 0x11111111 is what ibv_ud_pingpong uses
	{ ok = ($2 == 100 && h($4) == h("11111111") && $7 == "" && $8 == "")
	  if ($1 == "10.66.0.1") ok = ok && (h($3) == qb && h($5) == qa)
	  else ok = ok && (h($3) == qa && h($5) == qb)
	  if (!ok) print }')
check "every packet decodes as a UD SEND with the right QPNs and Q_Key, no malformed or expert warnings" test -z "$bad"
[ -n "$bad" ] && echo "$bad" | head
psn_ok=$(echo "$fields" | awk '$1 == "10.66.0.1" { if (n++ && $6 != (last + 1) % 16777216) bad++; last = $6 } END { print (n > 0 && !bad) ? "yes" : "no" }')
check "PSNs of one sender increase by one" test "$psn_ok" = yes

check "mckey between the namespaces (frb receives what fra sends to 239.1.2.4)" mckey_pair b 10.66.0.2 a 10.66.0.1 239.1.2.4

# One UD QP on fra whose bursts go, at random, to a QP of fra (delivered
# inside the device) and to a QP of frb across the veth (through the IP
# stack): the per-packet choice between the two paths loses nothing.
before=$(rdma statistic show link fra/1)
check "one UD QP sending to its own device and across the veth, mixed in bursts (ud_mixed)" \
	ip netns exec a build/userspace/tests/ud_mixed fra "$GA" frb "$GB" 100
after=$(rdma statistic show link fra/1)
# counter_in TEXT NAME: counter NAME in TEXT, a saved `rdma statistic show`
counter_in() { echo "$1" | tr ' ' '\n' | grep -A1 -x "$2" | tail -1; }
check "  ...fra sent both inside the device (tx_local) and to the wire (tx_packets)" \
	test $(( $(counter_in "$after" tx_local) - $(counter_in "$before" tx_local) )) -gt 0 -a \
	$(( $(counter_in "$after" tx_packets) - $(counter_in "$before" tx_packets) )) -gt 0

# The wire path's route cache (issue 21): each CPU keeps the route a
# destination took last, and must drop it the moment the routing changes.
# RC over addresses of their own (10.67/24, fd67::/64; perftest's TCP stays
# on 10.66). A route to the peer added in the middle of a run must stop
# the run: its packets take the new route (a cache that kept the old one
# would go on delivering them). The route must come while the QPs are
# connected: the RDMA core resolves the peer's MAC address through the
# routes when it connects a QP, and fails there first. IPv4: a route
# through a gateway that does not exist (the packets go to its address,
# which no one answers; ferroce names the netdev, and with an output device
# given the IPv4 stack treats a blackhole as on-link). IPv6: a blackhole,
# whose packets are counted as tx_drop_no_route. Then, with the route
# removed, a run completes. Both processes on CPU 0, the CPU whose cache
# the run warms before the route comes.
ip -n a addr add 10.67.0.1/24 dev va
ip -n b addr add 10.67.0.2/24 dev vb
ip -n a addr add fd67::1/64 dev va nodad
ip -n b addr add fd67::2/64 dev vb nodad
RA4=$(wait_gid fra '::ffff:10\.67\.0\.1'); RB4=$(wait_gid frb '::ffff:10\.67\.0\.2')
RA6=$(wait_gid fra 'fd67::1'); RB6=$(wait_gid frb 'fd67::2')
echo "route cache GIDs: fra $RA4 $RA6, frb $RB4 $RB6"
# rc_run GID_A GID_B [ROUTE...]: ib_write_bw of 4 KiB from fra to frb, 200
# writes; with ROUTE, a 20-second run, and `ip route add ROUTE` in a once
# fra has sent 2000 packets of it
rc_run() {
	local ga=$1 gb=$2 len=(-n 200) c s i base; shift 2
	[ $# -gt 0 ] && len=(-D 20)
	ip netns exec b timeout 60 taskset -c 0 ib_write_bw "${len[@]}" -s 4096 -d frb -x "$gb" >/tmp/srv.log 2>&1 &
	local spid=$!
	wait_listen 18515 b || { kill $spid; return 1; }
	base=$(counter fra tx_packets)
	ip netns exec a timeout 60 taskset -c 0 ib_write_bw "${len[@]}" -s 4096 -d fra -x "$ga" 10.66.0.2 >/tmp/cli.log 2>&1 &
	local cpid=$!
	if [ $# -gt 0 ]; then
		for i in $(seq 100); do
			[ "$(counter fra tx_packets)" -gt $((base + 2000)) ] && break
			sleep 0.2
		done
		echo "fra sent $(( $(counter fra tx_packets) - base )) packets; ip route add $*"
		ip -n a route add "$@" || echo "ip route add failed"
	fi
	wait $cpid; c=$?; wait $spid; s=$?
	grep -A1 "#bytes\|[Ff]ailed" /tmp/cli.log | head -3
	[ $c = 0 ] && [ $s = 0 ]
}
# route_cache NAME GID_A GID_B ROUTE...
route_cache() {
	local v=$1 ga=$2 gb=$3; shift 3
	nr0=$(counter fra tx_drop_no_route)
	check_fails "a route to the peer added in the middle of an RC run over $v stops it (ip route add $*)" \
		rc_run "$ga" "$gb" "$@"
	nr1=$(counter fra tx_drop_no_route)
	echo "tx_drop_no_route $nr0 -> $nr1"
	check "ip route del $*" ip -n a route del "$@"
	check "  ...and with the route gone, a run over $v completes" rc_run "$ga" "$gb"
}
route_cache IPv4 "$RA4" "$RB4" 10.67.0.2/32 via 10.66.0.99 dev va
route_cache IPv6 "$RA6" "$RB6" blackhole fd67::2/128
check "  ...the IPv6 blackhole's packets were counted as tx_drop_no_route" test "$nr1" -gt "$nr0"

check "rdma link delete in namespace a" ip netns exec a rdma link delete fra
check "rdma link delete in namespace b" ip netns exec b rdma link delete frb
ip netns del a
ip netns del b
# A namespace's teardown finishes: nothing of ferroce's holds its devices
# (its sockets once held the loopback device through a multicast route,
# and the namespace's teardown waited for it forever)
gone() {
	local i
	for i in $(seq 30); do
		[ -z "$(ip netns list)" ] && ! dmesg | grep -q "unregister_netdevice: waiting for" && sleep 1 &&
			! dmesg | grep -q "unregister_netdevice: waiting for" && return 0
		sleep 1
	done
	dmesg | grep "unregister_netdevice: waiting for" | tail -3
	return 1
}
check "the namespaces' devices unregister after the multicast traffic (no 'waiting for lo')" gone
check "rdma link delete fr0" rdma link delete fr0
check "rmmod ferroce after the tests" rmmod ferroce
finish
