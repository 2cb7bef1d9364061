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

counter() {
	rdma statistic show link "$1/1" | tr ' ' '\n' | awk -v n="$2" 'p { print; exit } $0 == n { p = 1 }'
}
RX="rx_accepted rx_seq_err_or_nak rx_drop_transport rx_drop_malformed rx_drop_bad_icrc rx_drop_no_qp rx_drop_no_mem rx_drop_addr_mismatch"
# snap VAR: fra's receive counters, frb's tx_packets and the kernel's drops
# on the way (softnet backlog, va's receive drops)
snap() {
	local -n s=$1
	local c
	for c in rx_packets $RX; do s[$c]=$(counter fra $c); done
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
	check "  ...every crafted packet accounted for (fra's rx_packets = crafted + frb's + kernel drops)" \
		test $(($(d rx_packets) + $(d backlog) + $(d va_drop) + $(d ip_drop))) = $((sent + $(d frb_tx)))
	icrc=$(sed -n 's/^class bad-icrc *//p' /tmp/fuzz.log)
	check "  ...bad ICRCs counted (rx_drop_bad_icrc >= $icrc)" test "$(d rx_drop_bad_icrc)" -ge "$icrc"
	check "  ...spoofed sources counted (rx_drop_addr_mismatch > 0)" test "$(d rx_drop_addr_mismatch)" -gt 0
done
check "rdma link delete fra" ip netns exec a rdma link delete fra
check "rdma link delete frb" ip netns exec b rdma link delete frb
finish
