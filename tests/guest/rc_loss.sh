#!/bin/bash
# Issue 5: RC data integrity (userspace/tests/rc_integrity.c) between two
# ferroce devices on a veth pair whose ends live in two network namespaces:
# once on a clean link, once with loss, duplication and reordering injected
# by netem on both ends. Every byte and every completion is checked by the
# program; the device counters must show the recovery.
. "$(dirname "$0")/lib.sh"

type gid_index >/dev/null 2>&1 || gid_index() {
	ibv_devinfo -v -d "$1" | sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*$2, RoCE v2.*/\1/p" | head -1
}
COUNTERS="tx_retransmit tx_window_wait tx_window_cut rx_deferred rx_drop_deferred_full rx_packets rx_accepted rx_drop_transport rx_seq_err_or_nak rx_drop_no_qp rx_drop_bad_icrc rx_drop_malformed tx_packets"
# snapshot VAR: all counters of both devices into the associative array VAR
snapshot() {
	local -n s=$1
	local d c
	for d in fra frb; do
		for c in $COUNTERS; do s[$d.$c]=$(counter $d $c); done
	done
}
# deltas BEFORE AFTER: print the counter differences
deltas() {
	local -n a=$1 b=$2
	local d c
	for d in fra frb; do
		printf '  %s:' $d
		for c in $COUNTERS; do printf ' %s +%s' $c $((${b[$d.$c]:-0} - ${a[$d.$c]:-0})); done
		echo
	done
}
# delta2 BEFORE AFTER COUNTER: COUNTER's growth on both devices together
delta2() {
	local -n a=$1 b=$2
	echo $(( ${b[fra.$3]} - ${a[fra.$3]} + ${b[frb.$3]} - ${a[frb.$3]} ))
}
# show_links: the netem queues (also into qa and qb) and both devices'
# counters
show_links() {
	qa=$(ip netns exec a tc -s qdisc show dev va)
	qb=$(ip netns exec b tc -s qdisc show dev vb)
	echo "$qa"
	echo "$qb"
	rdma statistic show link fra/1
	rdma statistic show link frb/1
}
# run_rc LOG ARGS...: rc_integrity between fra and frb, output also in LOG
run_rc() {
	local log=$1; shift
	timeout 480 build/userspace/tests/rc_integrity fra "$GA" frb "$GB" "$@" 2>&1 | tee "$log"
	return "${PIPESTATUS[0]}"
}
# per_mb BEFORE AFTER LOG: packets both devices sent per MB the run moved
per_mb() {
	local -n a=$1 b=$2
	local mb tx
	mb=$(sed -n 's/^summary: [0-9.]* s, \([0-9.]*\) MB.*/\1/p' "$3")
	tx=$((${b[fra.tx_packets]} - ${a[fra.tx_packets]} + ${b[frb.tx_packets]} - ${a[frb.tx_packets]}))
	awk -v tx="$tx" -v mb="${mb:-0}" 'BEGIN { printf "%d packets sent for %.1f MB: %.0f packets per MB\n", tx, mb, (mb > 0 ? tx / mb : 0) }'
}
OPS=${1:-2000}	# (tools/vm run tests/guest/rc_loss.sh [OPS])

check "sch_netem module loads" modprobe sch_netem
veth_namespaces
check "device fra in namespace a" ip netns exec a rdma link add fra type ferroce netdev va
check "device frb in namespace b" ip netns exec b rdma link add frb type ferroce netdev vb
sleep 1
GA=$(gid_index fra '::ffff:10\.66\.0\.1')
GB=$(gid_index frb '::ffff:10\.66\.0\.2')
echo "GID indices: fra $GA, frb $GB"
check "GIDs of both veth ends found" test -n "$GA" -a -n "$GB"

# 1. the clean link
declare -A s0 s1 s2
snapshot s0
t=$SECONDS
check "rc_integrity on the clean link ($OPS operations, 4 QP pairs, seed 1)" \
	run_rc /tmp/rc_clean.log --qps 4 --ops "$OPS" --seed 1
echo "clean run: $((SECONDS - t)) s"
snapshot s1
rdma statistic show link fra/1
rdma statistic show link frb/1
echo "counters during the clean run:"
deltas s0 s1
echo "clean run: $(per_mb s0 s1 /tmp/rc_clean.log)"
# The veth delivers on the sending CPU: the receive hand-off (design,
# "Receive hand-off") moved the bulk of what the run received to the other
# CPU, and rc_integrity found every byte in place, in order.
if [ "$(nproc)" -gt 1 ]; then
	check "the clean run's bulk batches were received on another CPU (rx_deferred)" \
		test "$(delta2 s0 s1 rx_deferred)" -gt 0
fi

# Receive bursts (design, "Receive bursts"): a batch of 64-byte writes
# reaches the responder whole and is answered once after it (an ACK covers
# every earlier PSN); answered packet by packet, as with rx_burst=0 (and
# by rdma_rxe), the responder sends about one ACK per write.
MR="ib_write_bw -s 64 -q 1 -n 5000"
ip netns exec b timeout 120 $MR -d frb -x "$GB" >/tmp/mr_server.log 2>&1 &
sleep 3
declare -A m0 m1
snapshot m0
check "$MR on the clean link" ip netns exec a timeout 120 $MR -d fra -x "$GA" 10.66.0.2
wait
snapshot m1
req=$((${m1[fra.tx_packets]} - ${m0[fra.tx_packets]}))
acks=$((${m1[frb.tx_packets]} - ${m0[frb.tx_packets]}))
echo "$MR: the writer sent $req packets, the responder $acks"
check "the responder answered the bursts of writes with fewer than 1 ACK per 2 writes" \
	test "$req" -gt 0 -a $((acks * 2)) -lt "$req"

# 2. loss, duplication and reordering on both ends (netem reorders by
# sending some packets at once while the rest wait for the delay)
NETEM="loss 5% duplicate 2% reorder 10% 50% delay 1ms"
check "netem on va" ip netns exec a tc qdisc add dev va root netem $NETEM
check "netem on vb" ip netns exec b tc qdisc add dev vb root netem $NETEM
t=$SECONDS
# (each buffer cut into up to 6 SGEs: a retransmission resumes inside one)
check "rc_integrity with loss, duplication and reordering ($OPS operations, 4 QP pairs, up to 6 SGEs a buffer, seed 2)" \
	run_rc /tmp/rc_lossy.log --qps 4 --ops "$OPS" --seed 2 --sges 6
echo "lossy run: $((SECONDS - t)) s"
snapshot s2
show_links
echo "counters during the lossy run:"
deltas s1 s2
echo "lossy run: $(per_mb s1 s2 /tmp/rc_lossy.log) (clean run: $(per_mb s0 s1 /tmp/rc_clean.log))"
expect "netem dropped packets on va" 'dropped [1-9]' "$qa"
expect "netem dropped packets on vb" 'dropped [1-9]' "$qb"
# A lost request shows as a PSN gap at the responder: rx_seq_err_or_nak counts
# every request that arrived out of sequence (answered by a NAK, or behind
# one already sent). Stale responses and ACKs (duplicates, answers to
# requests sent again) count as rx_drop_transport; tx_retransmit counts the
# request packets the requesters sent again (go-back-N, ACK timeouts).
naks=$(delta2 s1 s2 rx_seq_err_or_nak)
drops=$(delta2 s1 s2 rx_drop_transport)
echo "lossy run: $naks NAKs sent, $drops packets dropped by the transport (duplicates, out of sequence)"
check "recovery visible: requests out of sequence NAKed (rx_seq_err_or_nak)" test "$naks" -gt 0
check "recovery visible: stale packets dropped by the transport (rx_drop_transport)" test "$drops" -gt 0
rtx=$(delta2 s1 s2 tx_retransmit)
echo "lossy run: $rtx request packets retransmitted"
check "recovery visible: requests retransmitted (tx_retransmit)" test "$rtx" -gt 0
ppm() { per_mb "$@" | awk '{ print $(NF - 3) }'; }
pc=$(ppm s0 s1 /tmp/rc_clean.log)
pl=$(ppm s1 s2 /tmp/rc_lossy.log)
# (not a check: the clean link sees go-back-N too whenever a QP's packets
# leave out of order, so the two runs need not differ much)
echo "packets per MB: clean link $pc, lossy link $pl"
# every accepted packet got past validation: the path damaged nothing
bad=$(( ${s2[fra.rx_drop_bad_icrc]} + ${s2[frb.rx_drop_bad_icrc]} + ${s2[fra.rx_drop_malformed]} + ${s2[frb.rx_drop_malformed]} ))
check "no packet with a bad ICRC or malformed" test "$bad" = 0

# 3. a narrow link and many QPs: netem sends 100 Mbit/s and holds at most
# 100 packets; 64 QP pairs with 32 requests of up to 32 KiB each in flight
# would put thousands of packets on it. Each QP's own window never goes
# below 8 packets (1,024 for 64 pairs both ways), so only the device's
# shared window (drivers/ferroce/transport/rc/shared.rs) keeps the total
# near what the link holds: without it the QPs lose most of every round
# and run out of retries (IBV_WC_RETRY_EXC_ERR, 5 runs of 5 across two
# guests with ib_write_bw -q 1024).
NARROW="rate 100mbit limit 100"
ip netns exec a tc qdisc del dev va root
ip netns exec b tc qdisc del dev vb root
check "netem narrow link on va" ip netns exec a tc qdisc add dev va root netem $NARROW
check "netem narrow link on vb" ip netns exec b tc qdisc add dev vb root netem $NARROW
declare -A s3
t=$SECONDS
check "rc_integrity on a narrow link, 64 QP pairs, 32 requests each in flight ($OPS operations, seed 3)" \
	run_rc /tmp/rc_narrow.log --qps 64 --window 32 --max-size 32768 --ops "$OPS" --seed 3 --timeout 60
echo "narrow run: $((SECONDS - t)) s"
snapshot s3
# The run that exhausted its retries before the shared window (here, 1 of 1;
# 45,723 of its 90,239 packets were resends): 64 QPs, 16 writes of 64 KiB
# each in flight, 20 rounds.
BW="ib_write_bw -s 65536 -q 64 -t 16 -n 20"
ip netns exec b timeout 240 $BW -d frb -x "$GB" >/tmp/bw_server.log 2>&1 &
sleep 3
t=$SECONDS
check "$BW through the narrow link: every write completes" ip netns exec a timeout 240 $BW -d fra -x "$GA" 10.66.0.2
wait
echo "narrow ib_write_bw: $((SECONDS - t)) s"
declare -A s4
snapshot s4
show_links
echo "counters during the narrow rc_integrity run:"
deltas s2 s3
echo "counters during the narrow ib_write_bw run:"
deltas s3 s4
waits=$(delta2 s2 s4 tx_window_wait)
cuts=$(delta2 s2 s4 tx_window_cut)
echo "narrow runs: QPs queued for the shared window $waits times, the window cut $cuts times"
check "the shared window held QPs back (tx_window_wait)" test "$waits" -gt 0
check "the shared window shrank on losses (tx_window_cut)" test "$cuts" -gt 0
rtx=$(( ${s4[fra.tx_retransmit]} - ${s3[fra.tx_retransmit]} ))
txp=$(( ${s4[fra.tx_packets]} - ${s3[fra.tx_packets]} ))
echo "narrow ib_write_bw: $rtx of $txp packets were resends"
# (a count, not a time: without the shared window half the packets were)
check "fewer than 5% of the writer's packets were resends" test $((rtx * 20)) -lt "$txp"

ip netns exec a tc qdisc del dev va root
ip netns exec b tc qdisc del dev vb root
check "rdma link delete fra" ip netns exec a rdma link delete fra
check "rdma link delete frb" ip netns exec b rdma link delete frb
ip netns del a
ip netns del b
check "rmmod ferroce after the tests" rmmod ferroce
finish
