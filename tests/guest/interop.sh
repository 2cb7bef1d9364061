#!/bin/bash
# Issue 7 (first part): wire interop between ferroce and the stock kernel's
# rdma_rxe in one guest. A veth pair joins two network namespaces (rdma_rxe
# and ferroce both bind UDP port 4791, once per namespace):
#
#   rxa (rdma_rxe) on va in namespace a: 10.66.0.1/24 fd66::1/64
#   frb (ferroce)  on vb in namespace b: 10.66.0.2/24 fd66::2/64
#
# For both directions (ferroce client -> rxe server, rxe client -> ferroce
# server) and over IPv4 and IPv6 GIDs (the tools' own TCP exchange stays on
# IPv4): ibv_ud_pingpong, ibv_rc_pingpong -c, ibv_uc_pingpong -c and
# ib_write_bw -c UC (IPv4 GIDs), ib_send_bw (RC, and UD),
# ib_write_bw, ib_read_bw, ib_atomic_bw (both atomics) and ib_write_lat;
# rc_integrity with one device of each kind in one process; UD multicast
# both ways (userspace/tests/mcast.c over IPv4 and IPv6 groups; mckey
# through rdma_cm from ferroce to rxe); a capture on vb
# of the pingpongs, in which every packet ferroce sent must decode without a
# malformed-packet or expert warning and carry a correct ICRC; then netem
# loss, delay and reordering on vb, under which ibv_rc_pingpong -c and
# ib_write_bw must still finish both ways. Prints a summary table, also
# written to build/interop/summary.txt.
. "$(dirname "$0")/lib.sh"

T=${INTEROP_TIMEOUT:-120}	# seconds for one tool run
N=${INTEROP_ITERS:-200}		# iterations of most runs
OUT=/ferroce/build/interop
mkdir -p "$OUT"
ROWS=()

declare -A NS=([rxe]=a [fr]=b) DEV=([rxe]=rxa [fr]=frb) IP=([rxe]=10.66.0.1 [fr]=10.66.0.2) GID=()
declare -A NAME=([fr]=ferroce [rxe]=rxe)

check "rdma_rxe module loads" modprobe rdma_rxe
check "sch_netem module loads" modprobe sch_netem
ip netns add a
ip netns add b
ip link add va type veth peer name vb
ip link set va netns a
ip link set vb netns b
for x in "a va 1" "b vb 2"; do
	set -- $x
	ip -n $1 link set lo up
	ip -n $1 addr add 10.66.0.$3/24 dev $2
	ip -n $1 -6 addr add fd66::$3/64 dev $2 nodad
	ip -n $1 link set $2 up
done
# A wire keeps a sender's packets in order; a veth does not when the sender
# moves between CPUs: each packet waits in the backlog of the CPU that sent
# it, and a busy CPU's backlog can wait for ksoftirqd while the other CPU's
# is processed. Captured at both ends of this veth, 3.6% of ferroce's
# packets and 0.3% of rdma_rxe's arrived behind later ones. rdma_rxe's
# requester does not survive that: an ACK that arrives among the responses
# of a READ resets its state, and it completes the READ successfully with
# data missing (a WARNING in rxe_comp.c; rdma_rxe against itself failed
# rc_integrity 10 times in 16 under netem loss and reordering). RPS of
# both receive queues to one CPU puts every packet through one backlog, in
# the order sent: the clean link is in order, as a wire is (0 of 29,942 of
# ferroce's packets out of order). Disorder is part 4's job, with netem.
for x in "a va" "b vb"; do
	set -- $x
	check "RPS: $2's packets go through CPU 0's backlog (in order)" \
		ip netns exec $1 sh -c "echo 1 >/sys/class/net/$2/queues/rx-0/rps_cpus"
done
check "rxe device rxa on va (namespace a)" ip netns exec a rdma link add rxa type rxe netdev va
check "ferroce device frb on vb (namespace b)" ip netns exec b rdma link add frb type ferroce netdev vb

# wait_gid DEV ADDRESS-REGEX: the GID index, once the GID is there
wait_gid() {
	local i g
	for i in $(seq 50); do
		g=$(gid_index "$1" "$2")
		[ -n "$g" ] && { echo "$g"; return 0; }
		sleep 0.2
	done
	return 1
}
# counters DEV: "name value" lines of the port's counters (both drivers)
counters() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | grep . | awk 'NR > 2 && NR % 2 == 0 { print n, $1 } { n = $1 }'
}
# deltas FILE_BEFORE FILE_AFTER: the counters that changed
deltas() {
	awk 'NR == FNR { a[$1] = $2; next } $2 != a[$1] { printf " %s +%d", $1, $2 - a[$1] } END { print "" }' "$1" "$2"
}
GID[rxe4]=$(wait_gid rxa '::ffff:10\.66\.0\.1')
GID[rxe6]=$(wait_gid rxa 'fd66::1')
GID[fr4]=$(wait_gid frb '::ffff:10\.66\.0\.2')
GID[fr6]=$(wait_gid frb 'fd66::2')
echo "GID indices: rxa IPv4 ${GID[rxe4]} IPv6 ${GID[rxe6]}; frb IPv4 ${GID[fr4]} IPv6 ${GID[fr6]}"
check "all four GIDs found" test -n "${GID[rxe4]}" -a -n "${GID[rxe6]}" -a -n "${GID[fr4]}" -a -n "${GID[fr6]}"
ibv_devinfo -d rxa | grep -E 'hca_id|state|active_mtu'
ibv_devinfo -d frb | grep -E 'hca_id|state|active_mtu'

# _xpair_once CLI SRV V GIDFLAG PROG ARGS...: server PROG on device SRV in
# its namespace, then the client on device CLI towards the server's IPv4
# address; the RDMA traffic uses the IPv$V GIDs. Full logs only on failure.
_xpair_once() {
	local cli=$1 srv=$2 v=$3 gf=$4 prog=$5; shift 5
	local t0=$EPOCHREALTIME t1 t2 t3 i
	ip netns exec "${NS[$srv]}" timeout "$T" "$prog" -d "${DEV[$srv]}" "$gf" "${GID[$srv$v]}" "$@" >/tmp/srv.log 2>&1 &
	local spid=$!
	for i in $(seq 300); do
		listening $spid && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.1
	done
	if ! listening $spid; then
		echo "the server does not listen on TCP port 18515"
		kill $spid; wait $spid; cat /tmp/srv.log; return 1
	fi
	t1=$EPOCHREALTIME
	ip netns exec "${NS[$cli]}" timeout "$T" "$prog" -d "${DEV[$cli]}" "$gf" "${GID[$cli$v]}" "$@" "${IP[$srv]}" >/tmp/cli.log 2>&1
	local c=$?
	t2=$EPOCHREALTIME
	# A server that has not ended 20 s after a successful client will not
	# (see xpair): stop it rather than wait for the run's timeout.
	if [ $c = 0 ]; then
		for i in $(seq 200); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
		kill -0 $spid 2>/dev/null && { echo "    (the server has not ended 20 s after the client: stopped)"; kill $spid; }
	fi
	wait $spid
	local s=$?
	t3=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" \
		'BEGIN { printf "    (server listening after %.1f s, client ran %.1f s, server ended %.1f s later)\n", b - a, c - b, d - c }'
	if [ $c = 0 ] && [ $s = 0 ]; then
		grep -E 'iters in|^ *[0-9]+ +[0-9]+ +[0-9.]+ ' /tmp/cli.log | sed 's/^/    client: /'
		return 0
	fi
	echo "--- client ${DEV[$cli]} (exit $c)"; cat /tmp/cli.log
	echo "--- server ${DEV[$srv]} (exit $s)"; cat /tmp/srv.log
	return 1
}
# xpair ...: the same, retried when perftest could not calibrate its
# clock, or when under netem (NETEM_ON) one side of ibv_rc_pingpong
# finished every iteration and the other did not. Each side exits as soon
# as its own work completes; when netem drops its ACK of the peer's last
# message, the peer's retransmission finds no QP, and the peer fails (an
# rdma_rxe peer retransmits until the run's timeout). That is the tool's
# exit under loss, not the driver's, and it is not rare: netem drops 5% of
# ferroce's packets, that ACK among them (1 run in 26 of ferroce -> rxe
# failed so, measured 2026-12-03; a CI run failed it twice in a row). Up to
# three runs: a side that never answered fails all three.
xpair() {
	local try
	for try in 1 2 3; do
		_xpair_once "$@" && return 0
		if grep -q "Can't produce a report" /tmp/srv.log /tmp/cli.log; then
			echo "--- perftest could not calibrate its clock (emulated, loaded host): run $try of 3"
		elif [ -n "${NETEM_ON:-}" ] && [ "$5" = ibv_rc_pingpong ] &&
			[ "$(grep -c " iters in " /tmp/srv.log)" != "$(grep -c " iters in " /tmp/cli.log)" ]; then
			echo "--- one side finished and the other did not: its last ACK was lost after it exited (ibv_rc_pingpong under loss): run $try of 3"
		else
			return 1
		fi
	done
	return 1
}
# numbers PROG: what the client printed (bandwidth, latency)
numbers() {
	case $1 in
	ibv_*) awk '/bytes in .* seconds =/ { bw = $(NF - 1) " Mbit/s" } /iters in .* seconds =/ { l = $(NF - 1) " usec/iter" }
		END { printf "%s, %s", bw, l }' /tmp/cli.log ;;
	*_lat) awk '/t_typical/ { getline; printf "t_typical %s usec, t_avg %s usec", $5, $6; exit }' /tmp/cli.log ;;
	*) awk '/BW average/ { u = $0; sub(/.*BW average\[/, "", u); sub(/\].*/, "", u)
		getline; printf "avg %s %s (peak %s), %s Mpps", $4, u, $3, $5; exit }' /tmp/cli.log ;;
	esac
}
# run TAG CLI SRV V PROG ARGS...: one check and one summary row. For
# perftest the client's report must count every iteration (of -s and -n).
run() {
	local tag=$1 cli=$2 srv=$3 v=$4 prog=$5; shift 5
	local gf=-x pair="${NAME[$cli]}->${NAME[$srv]}" t0=$SECONDS res=pass nums
	case $prog in ibv_*) gf=-g ;; esac
	local name="$pair $tag$prog $* (IPv$v GIDs)"
	local before=$_fails
	check "$name" xpair "$cli" "$srv" "$v" "$gf" "$prog" "$@"
	nums=$(numbers "$prog")
	local s=2 n=1000 args="$*"
	case $prog in ib_atomic_*) s=8 ;; ib_send_bw | ib_write_bw | ib_read_bw) s=65536 ;; esac
	set -- "$@" ""
	while [ $# -gt 1 ]; do
		case $1 in -s) s=$2 ;; -n) n=$2 ;; esac
		shift
	done
	case $prog in
	ibv_*) expect "  ...$n iterations" "^$n iters in" "$(cat /tmp/cli.log)" ;;
	*) expect "  ...every iteration counted ($s bytes x $n)" "^ *$s +$n " "$(cat /tmp/cli.log)" ;;
	esac
	[ "$_fails" = "$before" ] || res=FAIL
	ROWS+=("$pair|$tag$prog $args|IPv$v|$res|$((SECONDS - t0))|$nums")
}

counters frb >/tmp/c0.frb; counters rxa >/tmp/c0.rxa
echo "setup done after $SECONDS s"
# 1. pingpongs with a capture of everything on vb
ip netns exec b dumpcap -i vb -F pcap -f 'udp port 4791' -w /tmp/interop.pcap >/tmp/dumpcap.log 2>&1 &
cpid=$!
for i in $(seq 150); do grep -q 'Capturing on' /tmp/dumpcap.log && break; sleep 0.2; done
for v in 4 6; do
	for d in "fr rxe" "rxe fr"; do
		set -- $d
		run "" $1 $2 $v ibv_ud_pingpong -n "$N" -s 1024
		run "" $1 $2 $v ibv_rc_pingpong -c -n "$N" -s 4096
	done
done
sleep 1
kill -INT $cpid
wait $cpid
tr '\r' '\n' </tmp/dumpcap.log | grep -v '^Packets: [0-9]*$' 

# Every packet ferroce sent (source 10.66.0.2 or fd66::2) must decode as
# InfiniBand with no malformed-packet or expert warning, IP and UDP checksums
# verified (rdma_rxe sends UDP checksum 0 over IPv6, which tshark flags on
# rxe's packets: those are only counted).
fields=$(tshark -n -r /tmp/interop.pcap -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE -T fields -E separator=' ' \
	-E occurrence=f -e ip.src -e ipv6.src -e infiniband.bth.opcode -e _ws.malformed -e _ws.expert.message 2>&1)
echo "$fields" | awk '{ print $1, $2 }' | sort | uniq -c
# (one of ip.src and ipv6.src is empty: awk's $1 is the source either way)
ours=$(echo "$fields" | awk '$1 == "10.66.0.2" || $1 == "fd66::2"' | grep -c .)
ours6=$(echo "$fields" | awk '$1 == "fd66::2"' | grep -c .)
theirs=$(echo "$fields" | awk '$1 == "10.66.0.1" || $1 == "fd66::1"' | grep -c .)
echo "captured: $ours packets from ferroce ($ours6 over IPv6), $theirs from rxe"
check "capture holds ferroce's packets over IPv4 and IPv6" test "$ours" -ge 1000 -a "$ours6" -ge 400
bad=$(echo "$fields" | awk '($1 == "10.66.0.2" || $1 == "fd66::2") && (NF != 2 || $2 !~ /^[0-9]+$/)')
check "every packet from ferroce decodes as InfiniBand, no malformed or expert warnings" test -z "$bad"
[ -n "$bad" ] && echo "$bad" | head -20
rxewarn=$(echo "$fields" | awk '($1 == "10.66.0.1" || $1 == "fd66::1") && NF != 2' | sort | uniq -c | head -5)
[ -n "$rxewarn" ] && echo "tshark's warnings on rxe's packets (not ours): $rxewarn"
# the ICRC of every packet, both senders, computed independently of ferroce
icrc=$(python3 - /tmp/interop.pcap <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
off, n, bad = 24, 0, []
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
        src = ".".join(map(str, ip[12:16]))
    else:
        ihl = 40
        ip = ip[:40 + struct.unpack(">H", ip[4:6])[0]]
        m = bytearray(ip); m[0] |= 0x0F; m[1] = m[2] = m[3] = m[7] = 0xFF
        src = ip[8:24].hex()
    m[ihl + 6] = m[ihl + 7] = 0xFF   # UDP checksum
    m[ihl + 12] = 0xFF               # BTH resv8a
    if zlib.crc32(b"\xff" * 8 + bytes(m[:-4])).to_bytes(4, "little") != ip[-4:]:
        bad.append(f"frame {n} from {src}")
print(f"{n} packets, {len(bad)} bad ICRC", *bad[:10])
PY
)
echo "ICRC: $icrc"
expect "every captured packet carries a correct ICRC" '^[1-9][0-9]* packets, 0 bad ICRC' "$icrc"

echo "capture checked after $SECONDS s"
# 2. the rest, no capture
for v in 4 6; do
	for d in "fr rxe" "rxe fr"; do
		set -- $d
		[ $v = 4 ] && run "" $1 $2 $v ibv_rc_pingpong -c -n 50 -s 65536
		[ $v = 4 ] && run "" $1 $2 $v ibv_uc_pingpong -c -n "$N" -s 4096
		[ $v = 4 ] && run "UC " $1 $2 $v ib_write_bw -c UC -n "$N"
		run "RC " $1 $2 $v ib_send_bw -n "$N"
		run "UD " $1 $2 $v ib_send_bw -c UD -s 1024 -n "$N"
		run "" $1 $2 $v ib_write_bw -n "$N"
		# perftest sets the requester's max_rd_atomic to the peer's out_reads,
		# by default the peer's max_qp_rd_atom: rdma_rxe's 128 is more than
		# ferroce's 16 (both refuse a max_rd_atomic above their own limit, as
		# a NIC does), so both sides are told -o 16
		run "" $1 $2 $v ib_read_bw -o 16 -n "$N"
		run "" $1 $2 $v ib_atomic_bw -o 16 -A CMP_AND_SWAP -n "$N"
		run "" $1 $2 $v ib_atomic_bw -o 16 -A FETCH_AND_ADD -n "$N"
		run "" $1 $2 $v ib_write_lat -n "$N"
	done
done

# 3. rc_integrity: one process, QPs between rxa and frb, every byte checked
run_rc() { # V ARGS...
	local v=$1; shift
	timeout 300 build/userspace/tests/rc_integrity rxa "${GID[rxe$v]}" frb "${GID[fr$v]}" "$@" 2>&1 | tee /tmp/rci.log
	return "${PIPESTATUS[0]}"
}
for v in 4 6; do
	t0=$SECONDS before=$_fails
	check "rc_integrity rxa <-> frb (IPv$v GIDs, 2 QP pairs, 400 operations)" run_rc $v --qps 2 --ops 400 --seed $v
	r=pass; [ "$_fails" = "$before" ] || r=FAIL
	ROWS+=("rxe<->ferroce|rc_integrity --qps 2 --ops 400|IPv$v|$r|$((SECONDS - t0))|$(sed -n 's/^summary: //p' /tmp/rci.log)")
done

# 3b. UD multicast: each driver receiving what the other sends to a group,
# through the verbs (userspace/tests/mcast.c recv and send) over IPv4 and
# IPv6 groups, and through rdma_cm with mckey (IPv4: the kernel's rdma_cm
# joins no IPv6 group on a RoCE v2 port) from ferroce to rdma_rxe. Not
# mckey from rdma_rxe: mckey's sender destroys its QP as soon as it has
# posted its sends, and rdma_rxe, which sends a process's work requests
# from a work item, then sends none of them (its sent_pkts does not move)
# rdma_rxe joins no IP group when one of its QPs attaches (ferroce joins it
# on its netdev, as a socket would; through rdma_cm the kernel's CM joins
# it for either): for the verbs runs the groups rxe receives are joined on
# its netdev by hand, or the IP stack would drop the datagrams before rxe
# sees them. (autojoin also makes the group a local address of va: rxe's
# own datagrams to it would stay in namespace a, so rxe sends to others.)
ip -n a addr add 239.66.0.5/32 dev va autojoin
ip -n a -6 addr add ff0e::66:5/128 dev va autojoin
for v in 4 6; do
	for d in "fr rxe" "rxe fr"; do
		set -- $d
		# the receiver's group: 239.66.0.5 / ff0e::66:5 for rxe, .6 / :6 for ferroce
		n=5; [ "$2" = fr ] && n=6
		if [ $v = 4 ]; then grp=239.66.0.$n; else grp=ff0e::66:$n; fi
		t0=$SECONDS before=$_fails
		check "${NAME[$1]}->${NAME[$2]} UD multicast to $grp (mcast send/recv, IPv$v GIDs)" \
			mcast_pair "${NS[$2]}" "${DEV[$2]}" "${GID[$2$v]}" "${NS[$1]}" "${DEV[$1]}" "${GID[$1$v]}" "$grp"
		r=pass; [ "$_fails" = "$before" ] || r=FAIL
		ROWS+=("${NAME[$1]}->${NAME[$2]}|mcast send/recv $grp|IPv$v|$r|$((SECONDS - t0))|$(grep -c "^ok" /tmp/srv.log) receiver checks passed")
	done
done
t0=$SECONDS before=$_fails
check "ferroce->rxe mckey: UD multicast through rdma_cm to 239.66.0.4" mckey_pair "${NS[rxe]}" "${IP[rxe]}" "${NS[fr]}" "${IP[fr]}" 239.66.0.4
r=pass; [ "$_fails" = "$before" ] || r=FAIL
ROWS+=("ferroce->rxe|mckey -m 239.66.0.4|IPv4|$r|$((SECONDS - t0))|$(grep -c "joined dgid" /tmp/srv.log) join")

counters frb >/tmp/c1.frb; counters rxa >/tmp/c1.rxa
echo "clean link done after $SECONDS s; counters that changed on the clean link:"
echo "  frb:$(deltas /tmp/c0.frb /tmp/c1.frb)"
echo "  rxa:$(deltas /tmp/c0.rxa /tmp/c1.rxa)"
# 4. loss, delay and reordering on vb (ferroce's end)
NETEM="loss 5% delay 1ms reorder 10% 50%"
check "netem on vb: $NETEM" ip netns exec b tc qdisc add dev vb root netem $NETEM
NETEM_ON=1
for d in "fr rxe" "rxe fr"; do
	set -- $d
	run "netem " $1 $2 4 ibv_rc_pingpong -c -n "$N" -s 4096
	run "netem " $1 $2 4 ib_write_bw -n "$N"
done
NETEM_ON=
q=$(ip netns exec b tc -s qdisc show dev vb)
echo "$q"
expect "netem dropped packets on vb" 'dropped [1-9]' "$q"
ip netns exec b tc qdisc del dev vb root

counters frb >/tmp/c2.frb; counters rxa >/tmp/c2.rxa
echo "netem done after $SECONDS s; counters that changed under netem:"
echo "  frb:$(deltas /tmp/c1.frb /tmp/c2.frb)"
echo "  rxa:$(deltas /tmp/c1.rxa /tmp/c2.rxa)"
dmesg | grep -iE 'rxe|ferroce' | tail -20

# summary
{
	printf '%-15s %-44s %-5s %-5s %5s  %s\n' pairing tool IP result secs numbers
	for r in "${ROWS[@]}"; do
		IFS='|' read -r p t v res s nums <<<"$r"
		printf '%-15s %-44s %-5s %-5s %5s  %s\n' "$p" "$t" "$v" "$res" "$s" "$nums"
	done
} >"$OUT/summary.txt"
echo "=== interop summary (build/interop/summary.txt)"
cat "$OUT/summary.txt"

check "rdma link delete rxa" ip netns exec a rdma link delete rxa
check "rdma link delete frb" ip netns exec b rdma link delete frb
ip netns del a
ip netns del b
check "rmmod ferroce after the tests" rmmod ferroce
finish
