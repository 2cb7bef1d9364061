#!/bin/bash
# Runs inside one guest (through `make bench`, part "veth"): the same
# perftest commands between two devices of one driver in two network
# namespaces joined by a veth pair, rdma_rxe (rxe0 -> rxe1) and ferroce
# (fr0 -> fr1), alternating, several rounds. Unlike the loopback part, every
# packet goes through the IP stack: UDP, IP, the ICRC and the netdev, at the
# guest's CPU speed. Besides each result, the guest's busy CPU time
# (/proc/stat) of the transfer alone and the bytes and messages it moved,
# for the CPU cost per byte and per message: the difference between the
# measured run and a longer one, set-up excluded (bench_measure in
# tools/bench-lib.sh).
# Writes build/bench/raw-veth.txt: "RESULT <test>_veth <driver> <round>
# <value>" and "CPU <test>_veth <driver> <round> <cpu seconds> <bytes>
# <messages>" lines.
# Arguments: ROUNDS (default 3), optionally the tests to run, and
# optionally "profile:1" or "profile:TEST,TEST...": after the rounds, one
# profiled run of each test (or of those named) per driver,
# build/bench/profile-<test>_veth-<driver>.txt (bench_profiles in
# tools/bench-lib.sh).
. "$(dirname "$0")/../tests/guest/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
ROUNDS=${1:-3}
PROFILE=${3:-}
OUT=/ferroce/build/bench
mkdir -p "$OUT"
RAW=$OUT/raw-veth.txt
: >"$RAW"
log() { echo "[bench veth] $*"; }

modprobe rdma_rxe
# drv net: namespaces ${drv}a and ${drv}b, veth ends ${drv}va/${drv}vb,
# addresses 10.<net>.0.1 (server) and .2 (client)
declare -A NET=([rxe]=91 [fr]=92) TYPE=([rxe]=rxe [fr]=ferroce) DEVA=([rxe]=rxe0 [fr]=fr0) DEVB=([rxe]=rxe1 [fr]=fr1)
declare -A GIDA GIDB
for drv in rxe fr; do
	n=${NET[$drv]}
	ip netns add ${drv}a
	ip netns add ${drv}b
	ip link add ${drv}va type veth peer name ${drv}vb
	for side in a b; do
		ip link set ${drv}v$side netns $drv$side
		ip -n $drv$side link set lo up
		ip -n $drv$side addr add 10.$n.0.$([ $side = a ] && echo 1 || echo 2)/24 dev ${drv}v$side
		ip -n $drv$side link set ${drv}v$side up
	done
	ip netns exec ${drv}a rdma link add ${DEVA[$drv]} type ${TYPE[$drv]} netdev ${drv}va
	ip netns exec ${drv}b rdma link add ${DEVB[$drv]} type ${TYPE[$drv]} netdev ${drv}vb
	GIDA[$drv]=$(wait_gid ${DEVA[$drv]} "::ffff:10\\.$n\\.0\\.1")
	GIDB[$drv]=$(wait_gid ${DEVB[$drv]} "::ffff:10\\.$n\\.0\\.2")
	log "$drv: ${DEVA[$drv]} GID ${GIDA[$drv]} <-veth-> ${DEVB[$drv]} GID ${GIDB[$drv]}"
done

# run_pair DRV CMD...: the server on device A in namespace A, the client on
# device B in namespace B connecting to A's address; 0 when both succeeded
run_pair() {
	local drv=$1 prog=$2; shift 2
	ip netns exec ${drv}a timeout 300 "$prog" "$@" -d ${DEVA[$drv]} -x ${GIDA[$drv]} >/tmp/srv.log 2>&1 &
	local spid=$!
	wait_listen 18515 ${drv}a || { kill $spid; return 1; }
	ip netns exec ${drv}b timeout 300 "$prog" "$@" -d ${DEVB[$drv]} -x ${GIDB[$drv]} 10.${NET[$drv]}.0.1 >/tmp/cli.log 2>&1
	local c=$?
	wait $spid
	local s=$?
	[ $c = 0 ] && [ $s = 0 ]
}

bench_select "$2"
printf '%s\n' "${BENCH_TESTS[@]}" | sed 's/^\([^|]*\)|/TEST \1_veth|/' >>"$RAW"
total=$((ROUNDS * ${#BENCH_TESTS[@]} * 2)) done_=0
for round in $(seq "$ROUNDS"); do
	for t in "${BENCH_TESTS[@]}"; do
		IFS='|' read -r name unit better cmd <<<"$t"
		order="rxe fr"; [ $((round % 2)) = 0 ] && order="fr rxe"
		for drv in $order; do
			done_=$((done_ + 1))
			# shellcheck disable=SC2086 # the perftest arguments, word by word
			bench_measure "$RAW" ${name}_veth $drv $round "$unit" \
				"[bench veth] [$done_/$total] round $round ${name}_veth $drv" run_pair $cmd
		done
	done
done
if [[ $PROFILE == profile:* ]]; then
	bench_profiles "${PROFILE#profile:}" "$OUT" _veth run_pair rxe0 fr0
fi
