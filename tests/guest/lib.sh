# Sourced by guest tests (they run inside the guest through `tools/vm run`).
# Each check prints one TAP-style line, "ok - NAME" or "not ok - NAME", that
# tools/check counts; `finish` exits non-zero when any check failed.
# shellcheck shell=bash

_fails=0
_count=0

# check NAME COMMAND...: run COMMAND (output shown), record the result.
check() {
	local name=$1; shift
	_count=$((_count + 1))
	echo "--- $name: $*"
	if "$@"; then
		echo "ok - $name"
	else
		echo "not ok - $name (exit status $?)"
		_fails=$((_fails + 1))
	fi
}

# report_only_from_here: the rest of the script only reports (another
# driver under the same hostile load, to compare): the verdict so far is
# kept in the run's directory. If that part brings the guest kernel down
# (rdma_rxe did, under uverbs_fuzz: a general protection fault in
# ib_uverbs_async_handler from rxe_receiver, 2026-12-06), tools/vm judges
# the run on the checks before it, unless ferroce is in the oops.
report_only_from_here() {
	if [ -n "${ferroce_run:-}" ]; then
		echo "$_fails" >"/ferroce/build/vm/$ferroce_run/verdict" && sync "/ferroce/build/vm/$ferroce_run/verdict"
	fi
	echo "--- from here on REPORT only ($_count checks, $_fails failed)"
}

# check_fails NAME COMMAND...: COMMAND must fail (bad input is refused).
check_fails() {
	local name=$1; shift
	_count=$((_count + 1))
	echo "--- $name (must fail): $*"
	if "$@"; then
		echo "not ok - $name (succeeded but must fail)"
		_fails=$((_fails + 1))
	else
		echo "ok - $name"
	fi
}

# expect NAME PATTERN TEXT: TEXT must match the extended regex PATTERN.
expect() {
	local name=$1 pattern=$2 text=$3
	_count=$((_count + 1))
	if grep -Eq -- "$pattern" <<<"$text"; then
		echo "ok - $name"
	else
		echo "not ok - $name: /$pattern/ not found in:"
		sed 's/^/    /' <<<"$text"
		_fails=$((_fails + 1))
	fi
}

# gid_index DEV ADDRESS: the GID table index of ADDRESS's RoCE v2 GID
gid_index() {
	ibv_devinfo -v -d "$1" | sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$2, RoCE v2.*/\1/p" | head -1
}
# wait_listen PORT [NETNS]: until a TCP server listens on PORT (perftest and
# pingpong servers exchange QP numbers over TCP before any RDMA traffic)
wait_listen() {
	local i
	for i in $(seq 200); do
		${2:+ip netns exec $2} ss -ltn | grep -q ":$1 " && return 0
		sleep 0.1
	done
	echo "nothing listens on TCP port $1" >&2
	return 1
}
# listening PID: a socket of PID's network namespace listens on TCP port
# 18515 (0x4853), where pingpong and perftest servers wait (bash builtins
# only, no process started per poll: process starts are slow under TCG)
listening() {
	local f sl l rem st rest
	for f in /proc/$1/net/tcp /proc/$1/net/tcp6; do
		[ -r "$f" ] || continue
		while read -r sl l rem st rest; do
			[[ $l == *:4853 && $st == 0A ]] && return 0
		done <"$f"
	done
	return 1
}
# cm_listening PID: an rdma_cm ID of PID or of its child (PID may be
# `timeout`) listens; rdma_cm servers open no TCP socket
cm_listening() {
	local p ids
	ids=$(rdma resource show cm_id 2>/dev/null | grep "state LISTEN") || return 1
	# (pgrep -P, not /proc/PID/task/*/children: that needs
	# CONFIG_PROC_CHILDREN, which check-debug's small kernel lacks)
	for p in "$1" $(pgrep -P "$1"); do
		grep -q " pid $p " <<<"$ids" && return 0
	done
	return 1
}
# CM_CONNECT_DELAY: userspace/tests/cm_connect_delay.c, preloaded into
# perftest's -R clients (env LD_PRELOAD=$CM_CONNECT_DELAY ib_send_bw -R ...):
# their second connect waits 2 s, so that it reaches a server that listens
CM_CONNECT_DELAY=$PWD/build/userspace/tests/cm_connect_delay.so
[ -f "$CM_CONNECT_DELAY" ] || echo "WARNING: $CM_CONNECT_DELAY is missing (tools/build all builds it): perftest -R runs may lose perftest#93's race"
# perftest_cm_race LOG: perftest -R's client sent its connection request
# before the server's rdma_cm listener for the test QPs existed (the server
# listens a second time after the handshake); the CM rejected it with reason
# 8 (invalid service ID), and perftest's retry of the connect crashes or
# gives up (linux-rdma/perftest#93): the run says nothing about the device
perftest_cm_race() { grep -q "RDMA_CM_EVENT_REJECTED; error: 8\." "$1"; }
# perftest_again TRY: whether the failed run TRY of 3 (/tmp/srv.log,
# /tmp/cli.log) failed for perftest's own reasons and is worth another run:
# its clock calibration was too noisy ("Can't produce a report", common
# under emulation on a loaded host) or it lost its rdma_cm connect race
perftest_again() {
	if grep -q "Can't produce a report" /tmp/srv.log /tmp/cli.log; then
		echo "--- perftest could not calibrate its clock (emulated, loaded host): run $1 of 3"
		return 0
	fi
	perftest_cm_race /tmp/cli.log || return 1
	echo "--- perftest's client connected before its server listened (REJ reason 8) and its retry failed (perftest bug, linux-rdma/perftest#93): run $1 of 3"
}
# counter DEV NAME: one counter of `rdma statistic show link DEV/1`
counter() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | awk -v n="$2" 'p { print; exit } $0 == n { p = 1 }'
}
# res_of DEV: "pd N cq N qp N cm_id N mr N ..." of DEV in `rdma resource
# show` (the kernel's own objects, such as the MAD layer's GSI QP, included)
res_of() { rdma resource show | sed -n "s/^[0-9]*: $1: //p"; }
# wait_pid PID SECONDS: wait for PID, killing it after SECONDS; its status
wait_pid() {
	local i
	for i in $(seq $(($2 * 10))); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill "$1" 2>/dev/null
	wait "$1"
}
# pingpong CLIENT_NS SERVER_NS SERVER_IP ARGS...: run a server and a client;
# a run that failed for perftest's own reasons (perftest_again) says nothing
# about the device and is retried (up to three runs).
pingpong() {
	local try
	for try in 1 2 3; do
		_pingpong_once "$@" && return 0
		perftest_again $try || return 1
	done
	return 1
}
_pingpong_once() {
	local cns=$1 sns=$2 sip=$3 prog=$4; shift 4
	${sns:+ip netns exec $sns} timeout "${PP_TIMEOUT:-300}" "$prog" "$@" >/tmp/srv.log 2>&1 &
	local spid=$!
	wait_listen 18515 "$sns" || { kill $spid; cat /tmp/srv.log; return 1; }
	${cns:+ip netns exec $cns} timeout "${PP_TIMEOUT:-300}" "$prog" "$@" "$sip" >/tmp/cli.log 2>&1
	local c=$?
	wait $spid
	local s=$?
	echo "--- client (exit $c)"; cat /tmp/cli.log
	echo "--- server (exit $s)"; cat /tmp/srv.log
	[ $c = 0 ] && [ $s = 0 ]
}

# mckey_pair RECV_NS RECV_ADDR SEND_NS SEND_ADDR GROUP [ARGS...]: rdmacm-utils
# mckey (UD multicast through rdma_cm; librdmacm attaches the QP to the
# group it joins): a receiver bound to RECV_ADDR joins GROUP and waits for
# every message (-C, 10 by default); once it has joined, a sender bound to
# SEND_ADDR joins and sends them. Both must succeed, and the receiver must
# have received them all. An empty NS runs in the guest's own namespace.
# IPv4 groups only: the kernel's rdma_cm refuses to join an IPv6 group on
# a RoCE v2 port (ENOTSUPP, whichever the driver), so IPv6 multicast is
# tested through the verbs (userspace/tests/mcast.c).
mckey_pair() {
	local rns=$1 raddr=$2 sns=$3 saddr=$4 group=$5 i; shift 5
	rm -f /tmp/srv.log /tmp/cli.log
	${rns:+ip netns exec $rns} timeout "${MCKEY_TIMEOUT:-60}" stdbuf -oL mckey -m "$group" -b "$raddr" "$@" >/tmp/srv.log 2>&1 &
	local rpid=$! c s
	for i in $(seq 300); do
		grep -q "joined dgid" /tmp/srv.log && break
		kill -0 $rpid 2>/dev/null || break
		sleep 0.1
	done
	if grep -q "joined dgid" /tmp/srv.log; then
		${sns:+ip netns exec $sns} timeout "${MCKEY_TIMEOUT:-60}" stdbuf -oL mckey -m "$group" -b "$saddr" -s "$@" >/tmp/cli.log 2>&1
		c=$?
	else
		echo "the receiver did not join $group"
		c=99
	fi
	wait_pid $rpid "${MCKEY_TIMEOUT:-60}"
	s=$?
	echo "--- sender (exit $c)"; cat /tmp/cli.log
	echo "--- receiver (exit $s)"; cat /tmp/srv.log
	[ $c = 0 ] && [ $s = 0 ] && grep -q "data transfers complete" /tmp/srv.log
}

# mcast_pair RECV_NS RECV_DEV RECV_GID SEND_NS SEND_DEV SEND_GID GROUP: UD
# multicast between two devices (of any driver) through the verbs
# (userspace/tests/mcast.c recv and send): the receiver attaches a QP to
# GROUP and, once it has, the sender sends to it and waits for its
# completions; the receiver must get every datagram intact. Logs
# /tmp/srv.log (receiver) and /tmp/cli.log (sender).
mcast_pair() {
	local rns=$1 rdev=$2 rgid=$3 sns=$4 sdev=$5 sgid=$6 group=$7 i c s
	rm -f /tmp/srv.log /tmp/cli.log
	${rns:+ip netns exec $rns} timeout 90 build/userspace/tests/mcast "$rdev" "$rgid" "$group" recv >/tmp/srv.log 2>&1 &
	local rpid=$!
	for i in $(seq 300); do
		grep -q "^joined" /tmp/srv.log && break
		kill -0 $rpid 2>/dev/null || break
		sleep 0.1
	done
	if grep -q "^joined" /tmp/srv.log; then
		${sns:+ip netns exec $sns} timeout 60 build/userspace/tests/mcast "$sdev" "$sgid" "$group" send >/tmp/cli.log 2>&1
		c=$?
	else
		c=99
	fi
	wait_pid $rpid 70
	s=$?
	echo "--- sender $sdev (exit $c)"; cat /tmp/cli.log
	echo "--- receiver $rdev (exit $s)"; cat /tmp/srv.log
	[ $c = 0 ] && [ $s = 0 ]
}

# veth_namespaces: namespaces a and b joined by a veth pair, va (10.66.0.1/24)
# in a and vb (10.66.0.2/24) in b, up, with their loopback devices
veth_namespaces() {
	ip netns add a
	ip netns add b
	ip link add va type veth peer name vb
	ip link set va netns a
	ip link set vb netns b
	ip -n a addr add 10.66.0.1/24 dev va
	ip -n b addr add 10.66.0.2/24 dev vb
	local ns
	for ns in a b; do
		ip -n $ns link set lo up
	done
	ip -n a link set va up
	ip -n b link set vb up
}

# wait_gid DEV ADDRESS-REGEX: the GID index of ADDRESS's RoCE v2 GID, once
# the device has it (GIDs appear shortly after `rdma link add`)
wait_gid() {
	local i g
	for i in $(seq 50); do
		g=$(gid_index "$1" "$2")
		[ -n "$g" ] && { echo "$g"; return 0; }
		sleep 0.2
	done
	return 1
}

# check_capture PCAP SRC...: every RoCEv2 packet in PCAP whose source address
# is one of SRC (IPv4 or IPv6, as tshark prints them) must decode as
# InfiniBand with no malformed-packet or expert warning (IP and UDP checksums
# verified) and carry a correct ICRC, computed here independently of ferroce.
# Packets of other sources are only counted. Prints a summary; sets
# CAPTURE_OURS to the number of packets from SRC.
# tshark's heuristic dissectors for InfiniBand payloads (Ethernet over IB,
# EoIB, SDP, iSER, ...) are turned off: they guess a protocol from the
# payload's bytes, and perftest's data (a 2-byte RDMA WRITE of ib_write_lat
# with 2 pad bytes of zero looks like an Ethertype and a zero "reserved"
# field) then decodes as a truncated IPv4, VLAN or CRTP packet, "malformed"
# whoever sent it. The headers (BTH, RETH, AETH, AtomicETH, DETH, ImmDt) and
# the checksums are still checked.
check_capture() {
	local pcap=$1; shift
	local srcs=" $* " fields bad icrc noheur
	noheur=$(tshark -G heuristic-decodes 2>/dev/null | awk -F '\t' '$1 == "infiniband.payload" { printf " --disable-heuristic %s", $5 }')
	# shellcheck disable=SC2086
	fields=$(tshark -n $noheur -r "$pcap" -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE -T fields -E separator=' ' \
		-E occurrence=f -e ip.src -e ipv6.src -e infiniband.bth.opcode -e _ws.malformed -e _ws.expert.message 2>&1 |
		grep -v '^Running as user')
	# (one of ip.src and ipv6.src is empty: awk's $1 is the source either way)
	echo "$fields" | awk '{ print $1 }' | sort | uniq -c | sed 's/^/    packets from /'
	CAPTURE_OURS=$(echo "$fields" | awk -v s="$srcs" 'index(s, " " $1 " ")' | grep -c .)
	bad=$(echo "$fields" | awk -v s="$srcs" 'index(s, " " $1 " ") && (NF != 2 || $2 !~ /^[0-9]+$/)')
	if [ -n "$bad" ]; then
		echo "    packets from$srcs that do not decode cleanly ($(echo "$bad" | grep -c .)):"
		echo "$bad" | sort | uniq -c | sort -rn | head -10 | sed 's/^/    /'
	fi
	icrc=$(python3 - "$pcap" "$@" <<'PY'
import ipaddress, struct, sys, zlib
d = open(sys.argv[1], "rb").read()
ours = {ipaddress.ip_address(a) for a in sys.argv[2:]}
off, n, mine, bad = 24, 0, 0, []
while off + 16 <= len(d):
    cap = struct.unpack("<I", d[off + 8:off + 12])[0]
    fr = d[off + 16:off + 16 + cap]
    off += 16 + cap
    n += 1
    ip = fr[14:]
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 15) * 4
        ip = ip[:struct.unpack(">H", ip[2:4])[0]]
        m = bytearray(ip); m[1] = m[8] = m[10] = m[11] = 0xFF
        src = ipaddress.ip_address(bytes(ip[12:16]))
    else:
        ihl = 40
        ip = ip[:40 + struct.unpack(">H", ip[4:6])[0]]
        m = bytearray(ip); m[0] |= 0x0F; m[1] = m[2] = m[3] = m[7] = 0xFF
        src = ipaddress.ip_address(bytes(ip[8:24]))
    if src not in ours:
        continue
    mine += 1
    m[ihl + 6] = m[ihl + 7] = 0xFF   # UDP checksum
    m[ihl + 12] = 0xFF               # BTH resv8a
    if zlib.crc32(b"\xff" * 8 + bytes(m[:-4])).to_bytes(4, "little") != ip[-4:]:
        bad.append(f"frame {n}")
print(f"{mine} of {n} packets checked, {len(bad)} bad ICRC", *bad[:10])
PY
)
	echo "    ICRC: $icrc"
	[ "$CAPTURE_OURS" -gt 0 ] && [ -z "$bad" ] && [[ $icrc == "$CAPTURE_OURS of "*", 0 bad ICRC" ]]
}

finish() {
	echo "guest test $(basename "$0"): $((_count - _fails)) of $_count checks passed"
	[ "$_fails" = 0 ]
}
