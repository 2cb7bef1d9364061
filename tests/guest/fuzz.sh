#!/bin/bash
# Issue 10: a hostile wire. userspace/tests/wire_fuzz, in namespace b, sends
# seeded streams of crafted RoCEv2 packets (truncated, bad ICRC, bad pad
# counts, reserved and unknown opcodes, valid and unknown QPNs, PSNs
# anywhere, bad R_Keys, lengths past regions, oversize READs, misaligned
# atomics, spoofed sources, UD with random Q_Keys, random bytes) at device
# fra in namespace a, while rc_integrity runs verified RC traffic between
# fra and frb (namespace b) over the same veth pair. A quarter of the
# crafted packets with "valid" QPNs go to any QPN below 64; three quarters to
# the live QPs of a victim, an endless ibv_rc_pingpong between fra and frb
# whose fate is not checked (a crafted ACK whose PSN lands in its window may
# rightly end it: the IBTA gives RC no defence against a spoofed source
# that guesses a PSN), so that they meet real QP state. Checks: the legitimate
# traffic verifies; every packet that reached fra is in exactly one of its
# receive counters (accepted, NAK, or a drop reason) and every crafted
# packet reached fra or was dropped by the kernel before it (backlog), so
# each is accounted for; spoofed and bad-ICRC packets show in their
# counters; the kernel logs nothing (tools/vm's dmesg check).
#   tools/vm run tests/guest/fuzz.sh [PACKETS_PER_SEED] [SEEDS...]
. "$(dirname "$0")/lib.sh"

# 100,000 per seed; 10,000 on make check-debug's kernel (KASAN and lockdep
# under emulation are about ten times slower)
COUNT=${1:-100000}
case $(uname -r) in *-debug) COUNT=${1:-10000} ;; esac
shift
SEEDS=${*:-1 2}

RX="rx_accepted rx_seq_err_or_nak rx_drop_transport rx_drop_malformed rx_drop_bad_icrc rx_drop_no_qp rx_drop_no_mem rx_drop_addr_mismatch"
# rx_drop_transport by reason (they sum to it)
QPR="rx_qp_bad_header rx_qp_bad_key rx_qp_state rx_qp_sequence rx_qp_no_wqe rx_qp_length rx_qp_invalid rx_qp_busy rx_qp_memory"
# snap VAR: fra's receive counters, frb's tx_packets and the kernel's drops
# on the way (softnet backlog, va's receive drops)
snap() {
	local -n s=$1
	local c
	for c in rx_packets $RX $QPR; do s[$c]=$(counter fra $c); done
	s[frb_tx]=$(counter frb tx_packets)
	local a b rest n=0
	while read -r a b rest; do n=$((n + 16#$b)); done </proc/net/softnet_stat
	s[backlog]=$n
	# the IP and UDP layers of namespace a (header and address errors,
	# discards, UDP errors)
	s[ip_drop]=$(ip netns exec a awk '/^Ip: [0-9]/ { n += $5 + $6 + $9 } /^Udp: [0-9]/ { n += $4 } END { print n + 0 }' /proc/net/snmp)
	s[va_drop]=$(ip -n a -s -j link show va | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["rx"]["dropped"])' 2>/dev/null || echo 0)
}

veth_namespaces
# spoofed sources (the target's own address, random ones) must reach the
# RoCE layer: no reverse-path filter, local sources accepted
for k in all default va; do
	ip netns exec a sysctl -qw net.ipv4.conf.$k.rp_filter=0 net.ipv4.conf.$k.accept_local=1
done
check "device fra in namespace a" ip netns exec a rdma link add fra type ferroce netdev va
check "device frb in namespace b" ip netns exec b rdma link add frb type ferroce netdev vb
GA=$(wait_gid fra '::ffff:10\.66\.0\.1')
GB=$(wait_gid frb '::ffff:10\.66\.0\.2')
check "GIDs of both veth ends found" test -n "$GA" -a -n "$GB"

declare -A s0 s1
for seed in $SEEDS; do
	# counters before anything runs (each is read by its own `rdma`
	# process: a snapshot taken while packets flow is not one instant)
	snap s0
	# the victim: an endless ibv_rc_pingpong (64-byte messages), its QPNs
	# on fra in /tmp/live_qpns (the GSI QP 1 as well)
	ip netns exec a timeout 900 ibv_rc_pingpong -d fra -g "$GA" -s 64 -n 1000000000 >/tmp/victim_s.log 2>&1 &
	vs=$!
	wait_listen 18515 a || cat /tmp/victim_s.log
	ip netns exec b timeout 900 ibv_rc_pingpong -d frb -g "$GB" -s 64 -n 1000000000 10.66.0.1 >/tmp/victim_c.log 2>&1 &
	vc=$!
	for i in $(seq 100); do
		rdma resource show qp link fra/1 | sed -n 's/.* lqpn \([0-9]*\) .*comm ibv_rc_pingpong.*/\1/p' >/tmp/live_qpns
		[ -s /tmp/live_qpns ] && break
		sleep 0.2
	done
	echo 1 >>/tmp/live_qpns
	check "victim QPs on fra for the crafted packets: $(tr '\n' ' ' </tmp/live_qpns)" test "$(wc -l </tmp/live_qpns)" -ge 2
	# legitimate traffic, every byte verified, for as long as the fuzzer runs
	(
		while :; do
			timeout 300 build/userspace/tests/rc_integrity fra "$GA" frb "$GB" --qps 2 --ops 300 --seed "$seed" >/tmp/rci.log 2>&1 || { cat /tmp/rci.log; exit 1; }
			[ -e /tmp/fuzz.done ] && exit 0
		done
	) >/tmp/legit.log 2>&1 &
	lpid=$!
	rm -f /tmp/fuzz.done
	t0=$SECONDS
	check "wire_fuzz seed $seed: $COUNT crafted packets at fra" \
		ip netns exec b build/userspace/tests/wire_fuzz 10.66.0.2 10.66.0.1 "$COUNT" "$seed" --peer 10.66.0.2 --qpn-file /tmp/live_qpns >/tmp/fuzz.log
	cat /tmp/fuzz.log
	echo "sent in $((SECONDS - t0)) s"
	touch /tmp/fuzz.done
	wait $lpid
	st=$?
	# the victim ends here (its state, whatever it is, does not matter);
	# its packets until then are in frb's tx_packets
	echo "victim QPs on fra after the fuzzer: $(rdma resource show qp link fra/1 | grep -o 'lqpn [0-9]* .*state [A-Z]*' | grep -v 'lqpn 1 ' | tr '\n' ';')"
	kill $vc $vs 2>/dev/null
	wait $vc $vs 2>/dev/null
	cat /tmp/legit.log; tail -3 /tmp/rci.log
	check "  ...legitimate RC traffic alongside verified every byte (rc_integrity)" test $st = 0
	sleep 1
	snap s1
	d() { echo $((${s1[$1]} - ${s0[$1]})); }
	sum=0
	line=""
	for c in $RX; do sum=$((sum + $(d $c))); line+=" $c +$(d $c)"; done
	sent=$(sed -n 's/^sent //p' /tmp/fuzz.log)
	echo "fra: rx_packets +$(d rx_packets):$line"
	echo "frb sent +$(d frb_tx); kernel drops: backlog +$(d backlog), va +$(d va_drop), IP/UDP +$(d ip_drop)"
	check "  ...every packet fra received is in one receive counter" test "$(d rx_packets)" = "$sum"
	qsum=0
	line=""
	for c in $QPR; do qsum=$((qsum + $(d $c))); line+=" ${c#rx_qp_} +$(d $c)"; done
	echo "fra: rx_drop_transport +$(d rx_drop_transport) by reason:$line"
	check "  ...every transport drop has one reason (the rx_qp_* sum to rx_drop_transport)" test "$(d rx_drop_transport)" = "$qsum"
	check "  ...crafted headers dropped as such (rx_qp_bad_header > 0)" test "$(d rx_qp_bad_header)" -gt 0
	check "  ...every crafted packet accounted for (fra's rx_packets = crafted + frb's + kernel drops)" \
		test $(($(d rx_packets) + $(d backlog) + $(d va_drop) + $(d ip_drop))) = $((sent + $(d frb_tx)))
	icrc=$(sed -n 's/^class bad-icrc *//p' /tmp/fuzz.log)
	check "  ...bad ICRCs counted (rx_drop_bad_icrc >= $icrc)" test "$(d rx_drop_bad_icrc)" -ge "$icrc"
	check "  ...spoofed sources counted (rx_drop_addr_mismatch > 0)" test "$(d rx_drop_addr_mismatch)" -gt 0
done
check "rdma link delete fra" ip netns exec a rdma link delete fra
check "rdma link delete frb" ip netns exec b rdma link delete frb

# Issue 17 (hostile verbs callers): userspace/tests/uverbs_fuzz, run as
# nobody, drives /dev/infiniband/uverbs* itself: raw write() and
# RDMA_VERBS_IOCTL commands with live, stale and random handles, wrong
# sizes, malformed attributes and random driver data, double destroys,
# libibverbs objects destroyed under traffic from other threads, fork() with
# live mapped rings, the file closed mid-command, rings mapped, scribbled on
# and unmapped (see the program's header). Seeded, time-bounded: UVF_SECS
# seconds (20, or 8 on check-debug's kernel) for each of UVF_SEEDS (1 2 3).
# GET_CONTEXT on a file that already has a context goes through write(),
# not the ioctl, whose error path in the RDMA core leaks a task_struct
# reference (see ctx_leak below and the program's ioctl_get_context_again):
# the rdma_rxe report run keeps the ioctl (--ioctl-get-context-again).
# Checks: it runs to its time limit; fr0's objects (rdma resource) are back
# to their count before each run once the process is gone; fr0 still carries
# RC and UD pingpongs; the kernel logged nothing (the patterns of
# tools/guest-init's dmesg check, checked here because rdma_rxe's part below
# floods the log and is not ferroce's to answer for).
UVF=build/userspace/tests/uverbs_fuzz
UVF_SECS=${UVF_SECS:-20}
case $(uname -r) in *-debug) UVF_SECS=${UVF_SECS_DEBUG:-8} ;; esac
UVF_SEEDS=${UVF_SEEDS:-1 2 3}
KREPORT='WARNING:|Oops|BUG:|general protection|Call Trace|kernel BUG|UBSAN|KASAN|refcount_t:|unreferenced object|self-detected stall|blocked for more than|list_add corruption|list_del corruption'
# kernel_reports [SINCE]: the log's lines that tools/guest-init fails a run
# on, after kernel time SINCE (seconds)
kernel_reports() {
	dmesg | awk -v t="${1:-0}" '{ s = $0; sub(/^\[ */, "", s); if (s + 0 >= t) print }' |
		grep -E "$KREPORT" | grep -v ' traps: [^ ]*\[[0-9]*\] '
}
ktime() { awk '{ print $1 }' /proc/uptime; }
# kmemleak_now: on a kernel with kmemleak (check-debug's), the leaks it
# suspects after a scan (tools/guest-init scans once more after the script)
KMEMLEAK=/sys/kernel/debug/kmemleak
kmemleak_now() {
	[ -e $KMEMLEAK ] || mount -t debugfs none /sys/kernel/debug 2>/dev/null
	[ -w $KMEMLEAK ] || return 0
	sleep 6 # (an object is a suspect once unreferenced for 5 s)
	echo scan >$KMEMLEAK
	cat $KMEMLEAK
}
# as_nobody CMD...: CMD as an unprivileged user (uverbs files are 0666)
as_nobody() {
	if command -v setpriv >/dev/null; then
		setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
	else
		echo "(no setpriv: running as root)"
		"$@"
	fi
}
# uvf DEV SEED SECONDS LOG [OPTION...]: the fuzzer, killed if it outlives its time by
# 120 s (and the OOM killer's first choice, should a driver let it exhaust
# memory); its exit status (uverbs_fuzz: 0 ran to its limit, 3 a phase
# hung). Still running 30 s past its time, its threads' kernel stacks are
# printed (the program prints its own view when its watchdog fires).
uvf() {
	local st pid i p t
	(
		echo 1000 >/proc/self/oom_score_adj
		as_nobody timeout -k 10 $(($3 + 120)) "$UVF" -d "$1" -s "$2" -t "$3" "${@:5}"
	) >"$4" 2>&1 &
	pid=$!
	for i in $(seq $((($3 + 30) * 10))); do
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 $pid 2>/dev/null; then
		echo "uverbs_fuzz still runs $(($3 + 30)) s after it started; its threads in the kernel:"
		for p in $(pgrep -x uverbs_fuzz); do
			for t in /proc/$p/task/*; do
				echo "--- pid $p task ${t##*/}: state $(awk '{ print $3 }' "$t/stat"), wchan $(cat "$t/wchan")"
				cat "$t/stack"
			done
		done
	fi
	wait $pid
	st=$?
	grep -v '^uverbs_fuzz: [0-9.]* s: ' "$4"
	return $st
}
# settled DEV BASELINE: DEV's objects back to BASELINE (within 10 s)
settled() {
	local i
	for i in $(seq 50); do
		[ "$(res_of "$1")" = "$2" ] && return 0
		sleep 0.2
	done
	echo "objects of $1 now: $(res_of "$1")"
	return 1
}
check "rdma link add fr0 on eth0 (uverbs_fuzz)" rdma link add fr0 type ferroce netdev eth0
G0=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
check "GID of 10.0.2.15 on fr0" test -n "$G0"
base=$(res_of fr0)
for seed in $UVF_SEEDS; do
	check "uverbs_fuzz seed $seed: $UVF_SECS s of hostile verbs commands on fr0 as nobody" \
		uvf fr0 "$seed" "$UVF_SECS" /tmp/uvf.log
	check "  ...fr0's objects back to their count before it ($base)" settled fr0 "$base"
done
check "  ...fr0 still works: ibv_rc_pingpong" pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G0" -n 200
check "  ...fr0 still works: ibv_ud_pingpong" pingpong "" "" 10.0.2.15 ibv_ud_pingpong -d fr0 -g "$G0" -n 200
# userspace/tests/ctx_leak: CTX_N processes (300), one after the other, each
# creates a context and sends GET_CONTEXT once more, which the kernel
# refuses (EINVAL); the task_struct slab's active objects are compared
# before and after, once the processes are gone and the count is steady.
# The RDMA core names a new context after its caller and takes a reference
# on the task (ib_alloc_ucontext -> rdma_restrack_set_name). By write() the
# refusal drops it (ib_uverbs_get_context calls rdma_restrack_put): a check,
# here. By the ioctl it does not (7.2.13: UVERBS_HANDLER(
# UVERBS_METHOD_GET_CONTEXT) in uverbs_std_types_device.c only kfree()s the
# context), one task_struct lost per call whatever the driver: a report at
# the end (it leaves kmemleak suspects on check-debug's kernel).
CTX=build/userspace/tests/ctx_leak
CTX_N=${CTX_N:-300}
check "ctx_leak: $CTX_N processes each refused a second GET_CONTEXT by write() on fr0; the task_struct slab grows by less than $((CTX_N / 4))" \
	"$CTX" fr0 write "$CTX_N" --max-growth $((CTX_N / 4 - 1))
check "rdma link delete fr0" rdma link delete fr0
reports=$(kernel_reports; kmemleak_now)
[ -n "$reports" ] && dmesg >"/ferroce/build/vm/${ferroce_run:-none}/dmesg-before-rxe.log" 2>/dev/null
check "no kernel report in the log so far (oops, WARN, BUG, KASAN, leak...)" test -z "$reports"
[ -n "$reports" ] && echo "$reports" | head -20

report_only_from_here
# The same harness against the stock kernel's rdma_rxe, REPORT ONLY (never
# a failed check): uvrxe0 on a dummy netdev of its own namespace (both drivers
# bind UDP 4791), UVF_RXE_SECS seconds (20, 8 on check-debug's), one seed.
# rdma_rxe logs a line per refused verb, and the harness makes it log kernel
# warnings (7.2: vmalloc's allocation-failure trace for a QP it accepts and
# cannot allocate; the WARN_ON in uverbs_destroy_ufile_hw when rxe refuses to
# destroy objects at close, which it then leaks). tools/guest-init fails a
# run on any such line, so this part runs last, after the check above judged
# everything before it: what it adds to the log is printed here, kept in
# build/vm/<run>/dmesg-rxe.log, and then cleared (dmesg -C, and kmemleak's
# list on a kmemleak kernel) so that the run is judged on ferroce alone.
# UVF_RXE=0 skips it.
# uvrxe_setup: rdma_rxe's device uvrxe0 on the dummy netdev d0 (10.89.0.1)
# of namespace uvrxe (rdma_rxe loaded)
uvrxe_setup() {
	ip netns add uvrxe
	ip -n uvrxe link set lo up
	ip -n uvrxe link add d0 type dummy
	ip -n uvrxe addr add 10.89.0.1/24 dev d0
	ip -n uvrxe link set d0 up
	ip netns exec uvrxe rdma link add uvrxe0 type rxe netdev d0
	wait_gid uvrxe0 '::ffff:10\.89\.0\.1' >/dev/null
}
UVF_RXE_SECS=${UVF_RXE_SECS:-20}
case $(uname -r) in *-debug) UVF_RXE_SECS=${UVF_RXE_SECS_DEBUG:-8} ;; esac
if [ "${UVF_RXE:-1}" = 0 ]; then
	echo "REPORT rdma_rxe: skipped (UVF_RXE=0)"
elif ! modprobe rdma_rxe; then
	echo "REPORT rdma_rxe: no rdma_rxe module, skipped"
else
	t0=$(ktime)
	uvrxe_setup
	rbase=$(res_of uvrxe0)
	# (in the background: a process stuck in rxe must not stop the script)
	ip netns exec uvrxe bash -c "$(declare -f as_nobody uvf); UVF=$UVF uvf uvrxe0 1 $UVF_RXE_SECS /tmp/uvf-rxe.log --ioctl-get-context-again" \
		>/tmp/uvf-rxe.out 2>&1 &
	rpid=$!
	for i in $(seq $(((UVF_RXE_SECS + 150) * 10))); do
		kill -0 $rpid 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 $rpid 2>/dev/null; then
		rst="still running after $((UVF_RXE_SECS + 150)) s (stuck in the kernel?)"
	else
		wait $rpid
		rst="exit status $?"
	fi
	sed 's/^/REPORT rdma_rxe: /' /tmp/uvf-rxe.out
	sleep 1
	echo "REPORT rdma_rxe: uverbs_fuzz $rst; objects of uvrxe0 before $rbase, after: $(res_of uvrxe0)"
	rleaks=$(kmemleak_now | grep -c 'unreferenced object')
	[ -w $KMEMLEAK ] && echo "REPORT rdma_rxe: kmemleak suspects $rleaks objects"
	rrep=$(kernel_reports "$t0")
	echo "REPORT rdma_rxe: $(echo -n "$rrep" | grep -c .) kernel report lines during its part, $(dmesg | awk -v t="$t0" '{ s = $0; sub(/^\[ */, "", s); if (s + 0 >= t) n++ } END { print n + 0 }') log lines"
	# (each report by its first line)
	dmesg | awk -v t="$t0" '{ s = $0; sub(/^\[ */, "", s) } s + 0 >= t' |
		grep -E "$KREPORT|allocation failure|vmalloc error" | grep -v 'Call Trace' |
		sed 's/^\[ *[0-9.]*\] //; s/size [0-9]*/size N/; s/, CPU#[0-9]*: .*//' | sort | uniq -c | sort -rn | head -10 |
		sed 's/^/REPORT rdma_rxe:   /'
	if [ -n "$rrep" ] || [ "${rleaks:-0}" != 0 ]; then
		{ dmesg; [ -r $KMEMLEAK ] && cat $KMEMLEAK; } >"/ferroce/build/vm/${ferroce_run:-none}/dmesg-rxe.log" 2>/dev/null
		echo "REPORT rdma_rxe: the log is kept in build/vm/${ferroce_run:-none}/dmesg-rxe.log and cleared (rdma_rxe's, not ferroce's)"
		dmesg -C
		[ -w $KMEMLEAK ] && echo clear >$KMEMLEAK
	fi
	# (uvrxe0 stays: deleting a device whose objects rxe leaked may wait forever)
fi

# REPORT only (never a failed check): ctx_leak's ioctl mode, the RDMA core's
# ioctl GET_CONTEXT error path (see the write check above), on ferroce (frc0
# on eth0: fr0 is gone) and on rdma_rxe (uvrxe0, made here when the part
# above did not). Its growth is about CTX_N on every driver: the reference
# is lost in the core, before any driver is called. On a kmemleak kernel
# the leaked task_structs are counted, then cleared from kmemleak's list so
# that the run is judged on ferroce alone. CTX_IOCTL=0 skips it.
# ctx_report DRIVER DEV [NETNS]: one run, its lines as REPORT lines
ctx_report() {
	local out g
	out=$(${3:+ip netns exec $3} timeout 300 "$CTX" "$2" ioctl "$CTX_N" 2>&1)
	echo "$out" | sed "s/^/REPORT ctx_leak $1: /"
	g=$(sed -n 's/^ctx_leak: .* growth \(-*[0-9]*\)$/\1/p' <<<"$out")
	echo "REPORT ctx_leak $1: the RDMA core's ioctl GET_CONTEXT error path (UVERBS_HANDLER(UVERBS_METHOD_GET_CONTEXT) without rdma_restrack_put): task_struct slab growth ${g:-unknown} after $CTX_N refused calls"
}
if [ "${CTX_IOCTL:-1}" = 0 ]; then
	echo "REPORT ctx_leak: skipped (CTX_IOCTL=0)"
else
	if rdma link add frc0 type ferroce netdev eth0; then
		ctx_report ferroce frc0
		rdma link delete frc0
	else
		echo "REPORT ctx_leak ferroce: rdma link add frc0 failed, skipped"
	fi
	if rdma link show | grep -q 'link uvrxe0/'; then
		ctx_report rdma_rxe uvrxe0 uvrxe
	elif modprobe rdma_rxe && uvrxe_setup; then
		ctx_report rdma_rxe uvrxe0 uvrxe
	else
		echo "REPORT ctx_leak rdma_rxe: no rdma_rxe device, skipped"
	fi
	[ -e $KMEMLEAK ] || mount -t debugfs none /sys/kernel/debug 2>/dev/null
	if [ -w $KMEMLEAK ]; then
		# A scan finds what has been unreferenced for 5 s: the last of the
		# children's task_structs show in a later one. Scan and clear until
		# a scan finds nothing new (at most 4), or tools/guest-init's final
		# scan reports the core's leak as ferroce's.
		cleaks=0
		for _ in 1 2 3 4; do
			n=$(kmemleak_now | grep -c 'unreferenced object')
			echo clear >$KMEMLEAK
			cleaks=$((cleaks + n))
			[ "$n" = 0 ] && break
		done
		echo "REPORT ctx_leak: kmemleak suspects $cleaks objects (the RDMA core's, cleared from its list)"
	fi
fi
finish
