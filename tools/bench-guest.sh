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
# profile_run DRV NAME CMD...: one timed run of a test (CMD with -D), the
# steady state of three seconds of its traffic under perf, the report.
# perf starts first, disabled (it takes seconds under TCG to set up), and
# is switched on and off through its control FIFO.
profile_run() {
	local drv=$1 name=$2 f=$OUT/profile-$2-$1.txt; shift 2
	rm -f /tmp/perf.ctl /tmp/perf.ack && mkfifo /tmp/perf.ctl /tmp/perf.ack
	perf record -q -a -g -F 997 -e cpu-clock -D -1 --control=fifo:/tmp/perf.ctl,/tmp/perf.ack \
		-o /tmp/perf.data -- sleep 120 >/tmp/perf-record.log 2>&1 &
	local ppid=$! ack
	exec 8<>/tmp/perf.ctl 9<>/tmp/perf.ack	# read-write: no open blocks, whether perf is up or not
	pingpong $drv $drv 10.88.0.1 "$@" -d "${DEV[$drv]}" -x "${GID[$drv]}" >/tmp/run.log 2>&1 &
	local rpid=$!
	# until the client has connected and registered its buffers (zeroing
	# them takes seconds under TCG) and packets flow: the device's counters
	# grow by more than 1000 in half a second
	local i a b=0
	for i in $(seq 60); do
		a=$b
		b=$(ip netns exec $drv rdma statistic show link "${DEV[$drv]}/1" |
			awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i } END { print s + 0 }')
		[ $i -gt 1 ] && [ $((b - a)) -gt 1000 ] && break
		sleep 0.5
	done
	echo enable >&8 && read -r -t 20 -u 9 ack
	sleep 3
	echo disable >&8 && read -r -t 20 -u 9 ack
	exec 8>&- 9<&-
	kill -INT $ppid 2>/dev/null
	wait $ppid
	wait $rpid
	local st=$? v
	v=$(bench_value "$unit" /tmp/cli.log)
	{
		echo "# profile of $name on $drv: perf record -a -e cpu-clock (the event TCG has), whole guest, 3 s of a timed run's traffic; the run: exit $st, $v $unit"
		echo "## by object"
		perf report -i /tmp/perf.data --stdio --no-children --sort dso -g none --percent-limit 0.5 2>&1 | grep -v '^$'
		echo "## by symbol"
		perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym -g none --percent-limit 0.4 2>&1 | grep -v '^$'
		echo "## who calls the symbols above 5%"
		perf report -i /tmp/perf.data --stdio --no-children --sort sym -g caller,2,callee,function,percent --percent-limit 5 2>&1 |
			grep -v '^$' | head -n 150
	} >"$f"
	log "profile $name $drv: $f (exit $st, $v $unit)"
	sed -n '/## by symbol/,$p' "$f" | grep -v '^#' | head -n 15
}
if [[ $PROFILE == profile:* ]]; then
	PROFILE=${PROFILE#profile:}
	if [ "$PROFILE" != 1 ]; then
		. "$(dirname "$0")/bench-lib.sh"	# the whole list again
		bench_select "$PROFILE"
	fi
	if ! command -v perf >/dev/null; then
		log "profile: no perf in the guest (tools/sysroot installs linux-perf; run it again)"
	else
		sysctl -qw kernel.perf_event_paranoid=-1 kernel.kptr_restrict=0
		for t in "${BENCH_TESTS[@]}"; do
			IFS='|' read -r name unit better cmd <<<"$t"
			# a timed run (-D) instead of a count: setup (registering
			# and zeroing the buffers) must not dominate the profile
			cmd=$(sed -E 's/ -n [0-9]+/ -D 9/' <<<"$cmd")
			for drv in rxe fr; do
				set -- $cmd
				profile_run $drv "$name" "$@"
			done
		done
	fi
fi
ip netns exec fr rdma statistic show link fr0/1
ip netns exec rxe rdma link delete rxe0
ip netns exec fr rdma link delete fr0
ip netns del rxe
ip netns del fr
rmmod ferroce
exit 0
