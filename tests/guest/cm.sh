#!/bin/bash
# Issue 9: rdma_cm over a ferroce device (one guest, loopback through its own
# addresses). The RDMA core's CM sends its MADs through ferroce's GSI QP
# (QP1); address and route resolution go through the device's GID table.
#   rping -V (every ping's data verified) over IPv4 and IPv6, ucmatose and
#   udaddy and mckey (rdmacm-utils, default message counts; mckey's
#   receiver and sender join one IPv4 group), perftest with -R
#   (ib_send_bw, ib_write_lat, ib_read_bw; perftest resolves only IPv4
#   addresses with -R), and afterwards the device's
#   resource counts (`rdma resource show`) back where they started.
. "$(dirname "$0")/lib.sh"

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G4=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
G6=$(wait_gid fr0 'fd00::15')
check "RoCE v2 GIDs of 10.0.2.15 and fd00::15" test -n "$G4" -a -n "$G6"
res0=$(res_of fr0)
echo "resources before: $res0"

# cm_wait PID: until an rdma_cm ID of PID listens (rdma_cm servers open no
# TCP socket)
cm_wait() {
	local i
	for i in $(seq 300); do
		cm_listening "$1" && return 0
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	echo "no rdma_cm ID of process $1 listens"
	return 1
}
# cm_pair "SERVER CMD" CLIENT CMD...: the server, once it listens the
# client; both must succeed (logs /tmp/srv.log, /tmp/cli.log). Up to three
# runs when one failed for perftest's own reasons (perftest_again).
cm_pair() {
	local try
	for try in 1 2 3; do
		_cm_pair_once "$@" && return 0
		perftest_again $try || return 1
	done
	return 1
}
_cm_pair_once() {
	local srv=$1; shift
	timeout 120 $srv >/tmp/srv.log 2>&1 &
	local spid=$! c s
	if cm_wait $spid; then
		timeout 120 "$@" >/tmp/cli.log 2>&1
		c=$?
	else
		c=99
	fi
	wait_pid $spid 30
	s=$?
	echo "--- client (exit $c)"; cat /tmp/cli.log
	echo "--- server (exit $s)"; cat /tmp/srv.log
	[ $c = 0 ] && [ $s = 0 ]
}

for a in 10.0.2.15 fd00::15; do
	check "rping -V -C 1000 over $a" cm_pair "rping -s -a $a -V -C 1000" rping -c -a $a -V -C 1000
	expect "  ...no data mismatch" '^$' "$(grep -i mismatch /tmp/cli.log /tmp/srv.log)"
done
check "ucmatose (rdmacm-utils, RC through rdma_cm)" cm_pair "ucmatose -b 10.0.2.15" ucmatose -s 10.0.2.15
expect "  ...both sides complete" 'test complete' "$(cat /tmp/cli.log)"
check "udaddy (rdmacm-utils, UD through rdma_cm)" cm_pair "udaddy -b 10.0.2.15" udaddy -s 10.0.2.15
expect "  ...both sides complete" 'test complete' "$(cat /tmp/cli.log)"
check "mckey (rdmacm-utils, UD multicast through rdma_cm) to 239.1.0.15" mckey_pair "" 10.0.2.15 "" 10.0.2.15 239.1.0.15
check "ib_send_bw -R (500 iterations)" cm_pair "ib_send_bw -R -d fr0 -n 500" env "LD_PRELOAD=$CM_CONNECT_DELAY" ib_send_bw -R -d fr0 -n 500 10.0.2.15
expect "  ...every iteration counted" '^ *65536 +500 ' "$(cat /tmp/cli.log)"
check "ib_write_lat -R (500 iterations)" cm_pair "ib_write_lat -R -d fr0 -n 500" env "LD_PRELOAD=$CM_CONNECT_DELAY" ib_write_lat -R -d fr0 -n 500 10.0.2.15
expect "  ...every iteration counted" '^ *2 +500 ' "$(cat /tmp/cli.log)"
check "ib_read_bw -R (200 iterations)" cm_pair "ib_read_bw -R -d fr0 -n 200" env "LD_PRELOAD=$CM_CONNECT_DELAY" ib_read_bw -R -d fr0 -n 200 10.0.2.15
expect "  ...every iteration counted" '^ *65536 +200 ' "$(cat /tmp/cli.log)"

# Every process left: the device holds only what it held before.
res1=$(res_of fr0)
echo "resources after: $res1"
check "rdma resource show: back to the starting counts ($res0)" test "$res1" = "$res0"
stats=$(rdma statistic show link fr0/1)
echo "$stats"
check "rdma link delete fr0" rdma link delete fr0
finish
