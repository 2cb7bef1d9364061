#!/bin/bash
# Runs inside one guest (through `make bench`): the same perftest commands on
# an rdma_rxe device and on a ferroce device, alternating, several rounds.
# Each driver gets its own network namespace with a dummy netdev (both bind
# UDP port 4791, which one namespace allows only once); server and client
# run in that namespace on the same device, as loopback.
# Writes build/bench/raw.txt: "RESULT <test> <driver> <round> <value>" lines,
# and "CPU <test> <driver> <round> <cpu seconds> <bytes> <messages>": the
# guest's busy CPU time (/proc/stat) of the transfer alone and what it
# moved: the difference between the measured run and a longer run of the
# same test right after it, so that the set-up drops out (bench_measure in
# tools/bench-lib.sh; CPURUN lines: each run whole).
# Arguments: ROUNDS (default 3), optionally the tests to run
# (comma-separated names, all when absent), and "profile:1" or
# "profile:TEST,TEST...": after the rounds, one more run of each test (or of
# those named) per driver under `perf record -a` (cpu-clock: the one event
# TCG has), not counted, reported by symbol and by object into
# build/bench/profile-<test>-<driver>.txt.
. "$(dirname "$0")/../tests/guest/lib.sh"
. "$(dirname "$0")/bench-lib.sh"
ROUNDS=${1:-3}
PROFILE=${3:-}
OUT=/ferroce/build/bench
mkdir -p "$OUT"
: >"$OUT/raw.txt"
log() { echo "[bench] $*"; }

modprobe rdma_rxe
for ns in rxe fr; do
	ip netns add $ns
	ip -n $ns link set lo up
	ip -n $ns link add d0 type dummy
	ip -n $ns addr add 10.88.0.1/24 dev d0
	ip -n $ns link set d0 up
done
ip netns exec rxe rdma link add rxe0 type rxe netdev d0
ip netns exec fr rdma link add fr0 type ferroce netdev d0
sleep 1
declare -A DEV=([rxe]=rxe0 [fr]=fr0)
declare -A GID=([rxe]=$(gid_index rxe0 '::ffff:10\.88\.0\.1') [fr]=$(gid_index fr0 '::ffff:10\.88\.0\.1'))
log "devices: rxe0 GID ${GID[rxe]}, fr0 GID ${GID[fr]}"

# The guest's copy bandwidth: the physical reference for every number here.
python3 - <<'PY' | tee -a "$OUT/raw.txt"
import time
b = bytearray(64 << 20)
best = 0.0
for _ in range(5):
    t = time.perf_counter()
    for _ in range(4):
        bytes(b)
    best = max(best, 4 * len(b) / (time.perf_counter() - t) / (1 << 20))
print(f"RESULT memcpy guest 0 {best:.1f}")
PY

bench_select "$2"
printf '%s\n' "${BENCH_TESTS[@]}" | sed 's/^/TEST /' >>"$OUT/raw.txt"

# run_loopback DRV CMD...: server and client of perftest CMD in DRV's
# namespace, on its one device
run_loopback() {
	local drv=$1; shift
	pingpong $drv $drv 10.88.0.1 "$@" -d "${DEV[$drv]}" -x "${GID[$drv]}" >/tmp/run.log 2>&1
}

for round in $(seq "$ROUNDS"); do
	for t in "${BENCH_TESTS[@]}"; do
		IFS='|' read -r name unit better cmd <<<"$t"
		# alternate which driver goes first, round by round
		order="rxe fr"; [ $((round % 2)) = 0 ] && order="fr rxe"
		for drv in $order; do
			# shellcheck disable=SC2086 # the perftest arguments, word by word
			bench_measure "$OUT/raw.txt" $name $drv $round "$unit" "[bench] round $round $name $drv" run_loopback $cmd
		done
	done
done
# the profiles (bench_profiles in tools/bench-lib.sh)
if [[ $PROFILE == profile:* ]]; then
	bench_profiles "${PROFILE#profile:}" "$OUT" "" run_loopback rxe0 fr0
fi
ip netns exec fr rdma statistic show link fr0/1
ip netns exec rxe rdma link delete rxe0
ip netns exec fr rdma link delete fr0
ip netns del rxe
ip netns del fr
rmmod ferroce
exit 0
