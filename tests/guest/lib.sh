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
# pingpong CLIENT_NS SERVER_NS SERVER_IP ARGS...: run a server and a client.
# perftest refuses to report when its calibration of the CPU clock is too
# noisy ("Can't produce a report", common under emulation on a loaded host);
# such a run says nothing about the device and is retried once.
pingpong() {
	local try
	for try in 1 2; do
		_pingpong_once "$@" && return 0
		grep -q "Can't produce a report" /tmp/srv.log /tmp/cli.log || return 1
		echo "--- perftest could not calibrate its clock (emulated, loaded host): retrying once"
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

finish() {
	echo "guest test $(basename "$0"): $((_count - _fails)) of $_count checks passed"
	[ "$_fails" = 0 ]
}
