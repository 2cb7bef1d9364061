#!/bin/bash
# tools/bench-pair.sh client|server: one side of the two-guest part of
# `make bench`. tools/bench runs it through `tools/vm pair` and one-line
# wrappers: guest A is the client (tests/pair/bench_a.sh), guest B the
# server (tests/pair/bench_b.sh). Both sides walk the same list of runs:
# for each round, each test of tools/bench-lib.sh, and each driver (the
# order alternating from round to round, as in the one-guest bench), one
# perftest run rxe->rxe or ferroce->ferroce across the link.
#
# The arrangement: rdma_rxe and ferroce both bind UDP port 4791, which one
# network namespace allows only once, and eth1 is the only link between the
# guests. So each guest gives each driver a macvlan device on eth1 (its own
# MAC address on the same wire) in a network namespace of its own, with an
# address of its own: 10.98.1.x for rdma_rxe, 10.98.2.x for ferroce (x = 1
# in guest A, 2 in B). Both devices then live side by side for the whole
# run, like the two namespaces of the one-guest bench, and the runs can
# alternate test by test; no device is created or deleted between runs.
#
# The two sides keep in step over a TCP control connection on eth1 itself
# (port 7472, the root namespace), as tests/pair/matrix.sh does: the server
# starts its tool and says "ready" once it listens; the client runs its
# side and answers "done K STATUS"; the server answers "srv K STATUS CAL"
# with its tool's status; the client says "next" (or "again" once, when
# perftest could not calibrate its clock). Every tool runs under `timeout`.
#
# Guest A writes build/bench/raw-pair.txt: TEST and RESULT lines as in
# build/bench/raw.txt, test names suffixed _2g. With CPU_SCALE > 1
# (tools/bench-lib.sh), each run that succeeded is followed by one with
# CPU_SCALE times its messages, not counted in the results, and each side
# takes its guest's busy CPU time (/proc/stat) around its own tool's run
# (the server sends its own in the "srv" answer): "CPU <test>_2g <driver>
# <round> <seconds> <bytes> <messages>" is the marginal cost of the
# transfer, both guests summed, set-up excluded as in the one-guest parts;
# "CPU2G <test>_2g <driver> <round> <client seconds> <server seconds>" the
# two sides of it. tools/bench writes the
# settings to build/bench/pair.conf first: ROUNDS, TESTS (the tests to run,
# all when empty), TIMEOUT (seconds for one tool run) and UD_ITERS.
. "$(dirname "$0")/../tests/guest/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
ROLE=$1
case $ROLE in client | server) ;; *) echo "usage: $0 client|server" >&2; exit 2 ;; esac
ROUNDS=3 TESTS= TIMEOUT=180 UD_ITERS=50
[ -r /ferroce/build/bench/pair.conf ] && . /ferroce/build/bench/pair.conf
bench_select "$TESTS"
OUT=/ferroce/build/bench
RAW=$OUT/raw-pair.txt
CTL=7472
log() { echo "[bench-pair $ROLE $SECONDS s] $*"; }

# UD is unreliable and perftest's UD server waits for every message: the
# link is two UDP sockets of QEMU's on the host, which drop datagrams when a
# guest falls behind (about 80 datagrams of 1 KiB fit), and a lost datagram
# leaves the server waiting until its timeout. Across the link the UD test
# is short (UD_ITERS messages) and bounded; a run that loses a datagram is
# recorded as failed.
UD_TIMEOUT=60

# --- the devices -----------------------------------------------------------------------
me=${FERROCE_SELF_IP##*.} peer=${FERROCE_PEER_IP##*.}
declare -A SUBNET=([rxe]=1 [fr]=2) DEV=([rxe]=rxe2 [fr]=fr2) TYPE=([rxe]=rxe [fr]=ferroce) GID
modprobe rdma_rxe
modprobe macvlan
for d in rxe fr; do
	ip netns add $d
	ip -n $d link set lo up
	ip link add mv$d link eth1 type macvlan mode bridge
	ip link set mv$d netns $d
	ip -n $d addr add 10.98.${SUBNET[$d]}.$me/24 dev mv$d
	ip -n $d link set mv$d up
	ip netns exec $d rdma link add ${DEV[$d]} type ${TYPE[$d]} netdev mv$d
	GID[$d]=$(wait_gid ${DEV[$d]} "::ffff:10\\.98\\.${SUBNET[$d]}\\.$me")
	if [ -z "${GID[$d]}" ]; then
		echo "no RoCE v2 GID for 10.98.${SUBNET[$d]}.$me on ${DEV[$d]}"
		ip -n $d addr
		exit 1
	fi
done
log "devices: rxe2 (10.98.1.$me) GID ${GID[rxe]}, fr2 (10.98.2.$me) GID ${GID[fr]}"

# --- the control connection --------------------------------------------------------------
if [ $ROLE = server ]; then
	coproc NC { exec busybox nc -l -p $CTL; }
	IN=${NC[0]} OUT_FD=${NC[1]}
else
	# the peer may still be booting (a TCG boot is retried once after 240 s)
	for _ in $(seq 600); do
		{ exec 3<>/dev/tcp/$FERROCE_PEER_IP/$CTL; } 2>/dev/null && break
		sleep 1
	done
	IN=3 OUT_FD=3
fi
send() { echo "$*" >&"$OUT_FD"; }
# recv SECONDS: the next line from the peer, as words in MSG
recv() {
	local line
	read -r -t "$1" -u "$IN" line || { log "control connection: nothing from the peer in $1 s"; return 1; }
	read -ra MSG <<<"$line"
}
send hello
if ! recv 600 || [ "${MSG[0]}" != hello ]; then
	log "no control connection with the peer guest"
	exit 1
fi
log "control connection with $FERROCE_PEER_IP:$CTL"

# --- the link's own bandwidth -------------------------------------------------------------
# The physical reference of the _2g numbers, as the guest's copy bandwidth
# is of the one-guest ones: TCP between the guests' eth1 addresses (the
# kernel's TCP recovers from the link's drops with its congestion control),
# 32 MiB three times, timed by the receiver from its first byte to the end;
# the best of the three. Guest A writes "RESULT linktcp guest 0 MIB_S".
# (No latency reference: ping's round trip, 1.2 ms, is mostly the wake-up
# of a sleeping process under emulation, which perftest's polling avoids.)
LINKREF=7474
if [ $ROLE = server ]; then
	timeout 300 python3 - "$LINKREF" <<'PY' &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))
s.listen(1)
for _ in range(3):
    c, _ = s.accept()
    n, t0 = 0, None
    while True:
        d = c.recv(1 << 16)
        if not d:
            break
        if t0 is None:
            t0 = time.perf_counter()
        n += len(d)
    c.sendall(f"{n} {time.perf_counter() - (t0 or 0)}\n".encode())
    c.close()
PY
	wait $! || true
else
	LINKREF_LINE=$(timeout 300 python3 - "$FERROCE_PEER_IP" "$LINKREF" <<'PY'

import socket, sys, time
best = 0.0
chunk = bytes(1 << 16)
for _ in range(3):
    for _ in range(300):
        try:
            c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
            break
        except OSError:
            time.sleep(0.1)
    for _ in range(512):
        c.sendall(chunk)
    c.shutdown(socket.SHUT_WR)
    n, dt = c.makefile().readline().split()
    c.close()
    if float(dt) > 0:
        best = max(best, int(n) / float(dt) / (1 << 20))
print(f"RESULT linktcp guest 0 {best:.1f}")
PY
	)
	log "link reference: ${LINKREF_LINE:-not measured}"
fi


# server_run K DRV T PROG ARGS...: RUN_OK=1 when the client's and the
# server's tool both succeeded (as the client sees it)
server_run() {
	local k=$1 d=$2 t=$3; shift 3
	local spid s cal c0 c1
	while :; do
		RUN_OK=0
		c0=$(cpu_busy)
		ip netns exec $d timeout "$t" "$@" -d ${DEV[$d]} -x ${GID[$d]} >/tmp/srv.log 2>&1 &
		spid=$!
		for _ in $(seq 300); do
			listening $spid && break
			kill -0 $spid 2>/dev/null || break
			sleep 0.1
		done
		if listening $spid; then send ready $k; else send noserver $k; fi
		recv $((t + 120)) || { kill $spid; wait $spid; return 1; }
		# a client that failed may leave its server waiting for a connection;
		# after one that succeeded, a plain wait (the tool runs under
		# `timeout`): no polling process in the CPU time taken around it
		if [ "${MSG[2]:-1}" = 0 ]; then wait $spid; else wait_pid $spid 10; fi
		s=$?
		c1=$(cpu_busy)
		[ "${MSG[2]:-1}$s" = 00 ] && RUN_OK=1
		cal=0
		grep -q "Can't produce a report" /tmp/srv.log && cal=1
		send srv $k $s $cal $((c1 - c0))
		if [ $s != 0 ]; then
			log "run $k: server $* on ${DEV[$d]} failed (exit $s):"
			tail -n 15 /tmp/srv.log
		fi
		recv 60 || return 1
		[ "${MSG[0]}" = again ] || return 0
	done
}

# client_run K DRV T PROG ARGS...: the client's status and the server's in
# C and S, the client's report in /tmp/cli.log, the busy CPU ticks of the
# client's guest around its tool in CT and those of the server's in ST
client_run() {
	local k=$1 d=$2 t=$3; shift 3
	local try=1 c0
	while :; do
		C=99 S=- CT=0 ST=0
		: >/tmp/cli.log
		recv $((t + 180)) || return 1
		c0=$(cpu_busy)
		if [ "${MSG[0]}" = ready ]; then
			# retry only the connect phase
			for _ in 1 2 3; do
				ip netns exec $d timeout "$t" "$@" -d ${DEV[$d]} -x ${GID[$d]} 10.98.${SUBNET[$d]}.$peer \
					>/tmp/cli.log 2>&1 3<&-
				C=$?
				grep -qiE "couldn't connect|unable to open file descriptor" /tmp/cli.log || break
				sleep 1
			done
		else
			echo "the server's $1 did not listen" >/tmp/cli.log
		fi
		CT=$(($(cpu_busy) - c0))
		send done $k $C
		recv $((t + 30)) || return 1
		S=${MSG[2]} ST=${MSG[4]:-0}
		if [ "$C$S" != 00 ] && [ $try = 1 ] && { [ "${MSG[3]}" = 1 ] || grep -q "Can't produce a report" /tmp/cli.log; }; then
			log "run $k: perftest could not calibrate its clock (emulated, loaded host): again"
			send again $k
			try=2
			continue
		fi
		send next $k
		return 0
	done
}

# --- the runs ----------------------------------------------------------------------------
if [ $ROLE = client ]; then
	mkdir -p "$OUT"
	: >"$RAW"
	[ -n "${LINKREF_LINE:-}" ] && echo "$LINKREF_LINE" >>"$RAW"
fi
ok=1 k=0
for round in $(seq "$ROUNDS"); do
	for t in "${BENCH_TESTS[@]}"; do
		IFS='|' read -r name unit better cmd <<<"$t"
		tmo=$TIMEOUT
		if [[ $cmd == *"-c UD"* ]]; then
			cmd=$(sed "s/-n [0-9]*/-n $UD_ITERS/" <<<"$cmd")
			tmo=$UD_TIMEOUT
		fi
		[ $ROLE = client ] && [ $round = 1 ] && echo "TEST ${name}_2g|$unit|$better|$cmd" >>"$RAW"
		order="rxe fr"; [ $((round % 2)) = 0 ] && order="fr rxe"
		for d in $order; do
			k=$((k + 1))
			[ $ok = 1 ] || { [ $ROLE = client ] && echo "RESULT ${name}_2g $d $round failed" >>"$RAW"; continue; }
			if [ $ROLE = server ]; then
				# shellcheck disable=SC2086
				server_run $k $d $tmo $cmd || { log "control connection to the client lost at run $k"; ok=0; }
				# the longer run for the CPU cost, when the client makes it too
				[ $RUN_OK = 1 ] && [ "${CPU_SCALE:-0}" -gt 1 ] && [ $ok = 1 ] || continue
				k=$((k + 1))
				# shellcheck disable=SC2086
				server_run $k $d $((tmo * 2)) $(bench_scaled "$CPU_SCALE" $cmd) ||
					{ log "control connection to the client lost at run $k"; ok=0; }
				continue
			fi
			t0=$SECONDS
			# shellcheck disable=SC2086
			client_run $k $d $tmo $cmd || { log "control connection to the server lost at run $k"; ok=0; }
			v=
			[ "$C$S" = 00 ] && v=$(bench_value "$unit" /tmp/cli.log)
			if [ -n "$v" ]; then
				log "round $round ${name}_2g $d: $v $unit ($((SECONDS - t0)) s)"
				echo "RESULT ${name}_2g $d $round $v" >>"$RAW"
			else
				log "round $round ${name}_2g $d: FAILED (client exit $C, server exit $S; $((SECONDS - t0)) s)"
				tail -n 15 /tmp/cli.log
				echo "RESULT ${name}_2g $d $round failed" >>"$RAW"
			fi
			[ "$C$S" = 00 ] && [ "${CPU_SCALE:-0}" -gt 1 ] && [ $ok = 1 ] || continue
			# the longer run for the CPU cost (see the top)
			# shellcheck disable=SC2086
			read -r b0 m0 <<<"$(bench_work $cmd /tmp/cli.log)"
			CT0=$CT ST0=$ST
			k=$((k + 1)) t0=$SECONDS
			# shellcheck disable=SC2086
			client_run $k $d $((tmo * 2)) $(bench_scaled "$CPU_SCALE" $cmd) ||
				{ log "control connection to the server lost at run $k"; ok=0; }
			if [ "$C$S" != 00 ]; then
				log "round $round ${name}_2g $d: the x$CPU_SCALE run for the CPU cost FAILED (client exit $C, server exit $S)"
				continue
			fi
			# shellcheck disable=SC2086
			read -r b1 m1 <<<"$(bench_work $(bench_scaled "$CPU_SCALE" $cmd) /tmp/cli.log)"
			cpu=$(bench_cpu_line "$RAW" CPU ${name}_2g $d $round $((CT0 + ST0)) $((CT + ST)) "$b0" "$m0" "$b1" "$m1")
			echo "CPU2G ${name}_2g $d $round $(ticks_s $((CT - CT0))) $(ticks_s $((ST - ST0)))" >>"$RAW"
			log "round $round ${name}_2g $d: marginal CPU $cpu s (client $(ticks_s $((CT - CT0))), server $(ticks_s $((ST - ST0)))) for $((m1 - m0)) messages ($((SECONDS - t0)) s)"
		done
	done
done
log "runs done"
# the drivers' counters: retransmissions show what the link's drops cost
for d in rxe fr; do ip netns exec $d rdma statistic show link ${DEV[$d]}/1 | tr -s ' \n' ' '; echo; done
for d in rxe fr; do
	ip netns exec $d rdma link delete ${DEV[$d]}
	ip netns del $d
done
exit 0
