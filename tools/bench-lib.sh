# Sourced by the guest scripts of `make bench` (tools/bench-guest.sh, one
# guest, loopback; tools/bench-pair.sh, two guests): the one list of tests
# both measure, and how a number is read from perftest's report.
# shellcheck shell=bash

# name | unit | better | perftest arguments (the scripts add the device,
# the GID index and, for the client, the server's address)
BENCH_TESTS=(
	"send_bw_64k|MiB/s|higher|ib_send_bw -s 65536 -n 1000"
	"send_bw_4k|MiB/s|higher|ib_send_bw -s 4096 -n 5000"
	"write_bw_64k|MiB/s|higher|ib_write_bw -s 65536 -n 1000"
	"write_bw_4k|MiB/s|higher|ib_write_bw -s 4096 -n 5000"
	"read_bw_64k|MiB/s|higher|ib_read_bw -s 65536 -n 1000"
	"ud_send_bw_mtu|MiB/s|higher|ib_send_bw -c UD -s 1024 -n 5000"
	"msg_rate_64|Mpps|higher|ib_write_bw -s 64 -q 4 -n 20000"
	# the message rate against the number of active QPs: 32768 messages in
	# all (-n is per QP), a send queue of 16 per QP (-t) so that 1024 QPs
	# of the client and 1024 of the server fit; the same depth for all three
	"msg_rate_64_q1|Mpps|higher|ib_write_bw -s 64 -q 1 -t 16 -n 32768"
	"msg_rate_64_q64|Mpps|higher|ib_write_bw -s 64 -q 64 -t 16 -n 512"
	"msg_rate_64_q1024|Mpps|higher|ib_write_bw -s 64 -q 1024 -t 16 -n 32"
	"write_lat_2|usec|lower|ib_write_lat -s 2 -n 2000"
	"send_lat_2|usec|lower|ib_send_lat -s 2 -n 2000"
)

# the whole list, whatever bench_select keeps (bench_profiles chooses from it)
BENCH_ALL=("${BENCH_TESTS[@]}")

# bench_select [NAMES]: keep in BENCH_TESTS only the tests named in NAMES
# (comma- or space-separated; FERROCE_BENCH_TESTS of tools/bench, for short
# development runs); all of them when NAMES is empty
bench_select() {
	[ -n "${1:-}" ] || return 0
	local t keep=() want=" ${1//,/ } "
	for t in "${BENCH_TESTS[@]}"; do
		[[ $want == *" ${t%%|*} "* ]] && keep+=("$t")
	done
	BENCH_TESTS=("${keep[@]}")
}

# bench_value UNIT LOG: the number perftest's client reported in LOG
bench_value() {
	case $1 in
	usec) awk '/t_typical/ { getline; print $5; exit }' "$2" ;;	# t_typical of the latency table
	Mpps) awk '/MsgRate/ { getline; print $5; exit }' "$2" ;;
	*) awk '/BW average/ { getline; print $4; exit }' "$2" ;;
	esac
}

# cpu_busy: the guest's busy CPU time so far, in clock ticks (USER_HZ) of
# every CPU: user, nice, system, irq, softirq and steal of /proc/stat's
# "cpu" line (idle and iowait left out)
cpu_busy() {
	awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat
}

# bench_retried: the last run was repeated by pingpong (tests/guest/lib.sh)
bench_retried() { grep -qs -- "^--- perftest.*: run [0-9] of 3" /tmp/run.log; }

# ticks_s TICKS: clock ticks of cpu_busy in seconds
ticks_s() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'; }

# bench_work CMD... LOG: what a run of perftest CMD moved, from the client's
# report in LOG: "BYTES MESSAGES". The bandwidth tests report #bytes per
# message and #iterations, which with -q N is already the sum over the N
# QPs (-n x N); without that line (the arguments alone), -s x -n x -q
bench_work() {
	local log=${*: -1} s=0 n=0 q=1 prev="" a
	for a in "${@:1:$#-1}"; do
		case $prev in -s) s=$a ;; -n) n=$a ;; -q) q=$a ;; esac
		prev=$a
	done
	awk -v s="$s" -v n="$n" -v q="$q" '
		/#bytes/ && /#iterations/ { getline; if ($2 + 0 > 0) { s = $1; n = $2; q = 1 } }
		END { printf "%.0f %.0f\n", s * n * q, n * q }' "$log"
}

# The CPU cost of a test is taken from two runs of it, so that the set-up
# of a run (process start, QP creation, the connection, buffer allocation,
# registration and zeroing: seconds under TCG, more than the transfer on a
# fast path) drops out: the measured run with its -n, and right after it on
# the same device a second run, not counted in the results, with CPU_SCALE
# times as many messages (-n x CPU_SCALE). Both do the same set-up; the
# difference of their busy CPU time over the difference of the bytes and
# messages they moved is the marginal cost of the transfer alone. It is a
# difference of two noisy numbers (the tick is 10 ms, the set-up varies
# with the host's load), so the report takes the median over the rounds;
# a round can even come out negative. The second run makes the bench take
# about twice as long. CPU_SCALE comes from build/bench/bench.conf
# (tools/bench writes it from FERROCE_BENCH_CPU_SCALE, default 3); 0 or 1:
# no second run, no CPU lines.
CPU_SCALE=3
# shellcheck disable=SC1091
[ -r /ferroce/build/bench/bench.conf ] && . /ferroce/build/bench/bench.conf

# bench_scaled K CMD...: CMD with its -n multiplied by K, word by word on
# stdout
bench_scaled() {
	local k=$1 prev="" a out=()
	shift
	for a in "$@"; do
		[ "$prev" = -n ] && a=$((a * k))
		out+=("$a")
		prev=$a
	done
	echo "${out[*]}"
}

# bench_cpu_line RAW TAG NAME DRV ROUND TICKS0 TICKS1 BYTES0 MSGS0 BYTES1 MSGS1:
# from the busy ticks, bytes and messages of the measured run (0) and of
# the longer run (1), appends "TAG NAME DRV ROUND seconds bytes messages"
# (the differences) to RAW and prints the marginal seconds
bench_cpu_line() {
	awk -v raw="$1" -v tag="$2" -v name="$3" -v drv="$4" -v round="$5" -v t0="$6" -v t1="$7" \
		-v b0="$8" -v m0="$9" -v b1="${10}" -v m1="${11}" -v hz="$(getconf CLK_TCK)" 'BEGIN {
		s = (t1 - t0) / hz
		printf "%s %s %s %s %.2f %.0f %.0f\n", tag, name, drv, round, s, b1 - b0, m1 - m0 >>raw
		printf "%.2f\n", s
	}'
}

# bench_measure RAW NAME DRV ROUND UNIT LABEL RUNNER CMD...: one measured
# run: `RUNNER DRV CMD...` runs perftest CMD (leaving the client's report in
# /tmp/cli.log, the server's in /tmp/srv.log); appends "RESULT NAME DRV
# ROUND value" to RAW (a failed run: "RESULT ... failed"). Then, when
# CPU_SCALE > 1, the longer run of the same CMD (see above), and "CPU NAME
# DRV ROUND seconds bytes messages": the marginal busy CPU time of the
# guest and the bytes and messages it bought; also "CPURUN NAME DRV ROUND
# K seconds bytes messages value" for each of the two runs as a whole
# (set-up included; K is 1 or CPU_SCALE). A run that the runner had to
# repeat (pingpong's retry, /tmp/run.log) gives no CPU line: its time holds
# two set-ups. Prints one line starting with LABEL.
bench_measure() {
	local raw=$1 name=$2 drv=$3 round=$4 unit=$5 label=$6 runner=$7 c0 c1 c2 c3 v v1 b0 m0 b1 m1 cpu
	shift 7
	rm -f /tmp/run.log
	c0=$(cpu_busy)
	if ! "$runner" "$drv" "$@"; then
		echo "$label: FAILED"
		tail -n 5 /tmp/cli.log /tmp/srv.log
		echo "RESULT $name $drv $round failed" >>"$raw"
		return 0
	fi
	c1=$(cpu_busy)
	v=$(bench_value "$unit" /tmp/cli.log)
	read -r b0 m0 <<<"$(bench_work "$@" /tmp/cli.log)"
	echo "RESULT $name $drv $round $v" >>"$raw"
	echo "CPURUN $name $drv $round 1 $(ticks_s $((c1 - c0))) $b0 $m0 $v" >>"$raw"
	if [ "${CPU_SCALE:-0}" -le 1 ]; then
		echo "$label: $v $unit"
		return 0
	fi
	local long
	long=$(bench_scaled "$CPU_SCALE" "$@")
	if bench_retried; then
		echo "$label: $v $unit; perftest ran again (tests/guest/lib.sh pingpong): no CPU cost this round"
		return 0
	fi
	c2=$(cpu_busy)
	# shellcheck disable=SC2086 # the perftest arguments, word by word
	if ! "$runner" "$drv" $long || bench_retried; then
		echo "$label: $v $unit; the x$CPU_SCALE run for the CPU cost FAILED"
		tail -n 5 /tmp/cli.log /tmp/srv.log
		return 0
	fi
	c3=$(cpu_busy)
	# shellcheck disable=SC2086
	read -r b1 m1 <<<"$(bench_work $long /tmp/cli.log)"
	v1=$(bench_value "$unit" /tmp/cli.log)
	echo "CPURUN $name $drv $round $CPU_SCALE $(ticks_s $((c3 - c2))) $b1 $m1 $v1" >>"$raw"
	cpu=$(bench_cpu_line "$raw" CPU "$name" "$drv" "$round" $((c1 - c0)) $((c3 - c2)) "$b0" "$m0" "$b1" "$m1")
	echo "$label: $v $unit; marginal CPU ${cpu} s for $((b1 - b0)) bytes, $((m1 - m0)) messages (whole runs: $(ticks_s $((c1 - c0))) s for $m0, $(ticks_s $((c3 - c2))) s for $m1 at $v1 $unit)"
}

# bench_profiles SPEC OUT SUFFIX RUNNER DEV_RXE DEV_FR: after
# the rounds, one more run of each test named in SPEC ("1": all of them;
# else comma-separated names) per driver under `perf record -a` (cpu-clock:
# the one event TCG has), not counted, reported by object, by symbol and by
# caller into OUT/profile-<test><SUFFIX>-<driver>.txt. RUNNER DRV CMD...
# runs one test (its client's report in /tmp/cli.log); DEV_* name the
# device of each driver whose counters show when traffic flows (sysfs lists
# the devices of every namespace: the RDMA core's netns mode is shared).
bench_profiles() {
	local spec=$1 out=$2 sfx=$3 runner=$4 t name unit better cmd drv
	local -A dev=([rxe]=$5 [fr]=$6)
	if ! command -v perf >/dev/null; then
		echo "[bench] profile: no perf in the guest (tools/sysroot installs linux-perf; run it again)"
		return 0
	fi
	sysctl -qw kernel.perf_event_paranoid=-1 kernel.kptr_restrict=0
	local saved=("${BENCH_TESTS[@]}")
	BENCH_TESTS=("${BENCH_ALL[@]}")
	[ "$spec" = 1 ] || bench_select "$spec"
	for t in "${BENCH_TESTS[@]}"; do
		IFS='|' read -r name unit better cmd <<<"$t"
		# a timed run (-D) instead of a count: setup (registering and
		# zeroing the buffers) must not dominate the profile. 20 s, with
		# the counters read from sysfs (bench_profile_run), gave every
		# window traffic; 9 s, with them read through rdma and awk, left
		# ferroce's veth send_bw_64k and write_bw_64k windows at +0
		cmd=$(sed -E 's/ -n [0-9]+/ -D 20/' <<<"$cmd")
		for drv in rxe fr; do
			# shellcheck disable=SC2086 # the perftest arguments, word by word
			bench_profile_run "$out/profile-$name$sfx-$drv.txt" "$name$sfx" "$unit" "${dev[$drv]}" "$runner" $drv $cmd
		done
	done
	BENCH_TESTS=("${saved[@]}")
}

# bench_profile_run FILE NAME UNIT DEV RUNNER ARGS...: one timed run
# (RUNNER ARGS..., in the background), the steady state of three seconds
# of its traffic under perf, the report in FILE. perf starts first,
# disabled (it takes seconds under TCG to set up), and is switched on and
# off through its control FIFO.
bench_profile_run() {
	local f=$1 name=$2 unit=$3 dev=$4; shift 4
	local drv=$2	# ARGS: RUNNER DRV CMD...
	rm -f /tmp/perf.ctl /tmp/perf.ack && mkfifo /tmp/perf.ctl /tmp/perf.ack
	perf record -q -a -g -F 997 -e cpu-clock -D -1 --control=fifo:/tmp/perf.ctl,/tmp/perf.ack \
		-o /tmp/perf.data -- sleep 120 >/tmp/perf-record.log 2>&1 &
	local ppid=$! ack
	exec 8<>/tmp/perf.ctl 9<>/tmp/perf.ack	# read-write: no open blocks, whether perf is up or not
	# perf answers its FIFO only once it is set up (seconds under TCG); an
	# enable sent before then waited there, and the window opened after a
	# short run had ended (a veth send_bw_64k profile was 89% idle)
	local t0=$SECONDS
	echo ping >&8
	read -r -t 120 -u 9 ack || echo "[bench] profile $name $drv: perf did not answer in 120 s"
	echo "[bench] profile $name $drv: perf ready after $((SECONDS - t0)) s"
	"$@" &
	local rpid=$!
	# The sum of the device's counters, into DS, read from sysfs by the
	# shell itself (no process, no subshell): under saturated traffic each
	# process this loop started (ip netns exec, rdma, awk) waited seconds
	# for a CPU, and the window opened after a run had ended. The RDMA
	# core's netns mode is shared, so /sys/class/infiniband lists the
	# devices of every namespace.
	devsum() {
		local f x
		DS=0
		for f in /sys/class/infiniband/"$dev"/ports/1/hw_counters/*; do
			read -r x <"$f" 2>/dev/null || continue
			[[ $x =~ ^[0-9]+$ ]] && DS=$((DS + x))
		done
	}
	# until the client has connected and registered its buffers (zeroing
	# them takes seconds under TCG) and packets flow: the device's counters
	# grow by more than 1000 in half a second
	local i a b=0
	for i in $(seq 60); do
		a=$b
		devsum
		b=$DS
		[ "$i" -gt 1 ] && [ $((b - a)) -gt 1000 ] && break
		sleep 0.5
	done
	local t1=$SECONDS
	echo enable >&8 && read -r -t 20 -u 9 ack
	echo "[bench] profile $name $drv: traffic seen after $((t1 - t0)) s, perf on after $((SECONDS - t1)) s more"
	devsum
	a=$DS
	sleep 3
	devsum
	b=$DS
	echo disable >&8 && read -r -t 20 -u 9 ack
	exec 8>&- 9<&-
	kill -INT $ppid 2>/dev/null
	wait $ppid
	wait $rpid
	local st=$? v
	v=$(bench_value "$unit" /tmp/cli.log)
	{
		echo "# profile of $name on $drv: perf record -a -e cpu-clock (the event TCG has), whole guest, 3 s of a timed run's traffic; the run: exit $st, $v $unit; the device's counters grew by $((b - a)) in the window"
		echo "## by object"
		perf report -i /tmp/perf.data --stdio --no-children --sort dso -g none --percent-limit 0.5 2>&1 | grep -v '^$'
		echo "## by symbol"
		perf report -i /tmp/perf.data --stdio --no-children --sort dso,sym -g none --percent-limit 0.4 2>&1 | grep -v '^$'
		echo "## who calls the symbols above 5%"
		perf report -i /tmp/perf.data --stdio --no-children --sort sym -g caller,2,callee,function,percent --percent-limit 5 2>&1 |
			grep -v '^$' | head -n 150
		if [ "$st" != 0 ]; then
			# what the failed run said (the profile is of what ran before)
			echo "## the run exited $st: the client's last lines"
			tail -n 15 /tmp/cli.log
			echo "## the server's last lines"
			tail -n 15 /tmp/srv.log
		fi
	} >"$f"
	echo "[bench] profile $name $drv: $f (exit $st, $v $unit; counters +$((b - a)) in the window)"
	[ $((b - a)) -gt 1000 ] || echo "[bench] profile $name $drv: little traffic in the window (counters +$((b - a))): read the profile with care"
	[ "$st" = 0 ] || { echo "[bench] profile $name $drv: the run exited $st; its client said:"; tail -n 5 /tmp/cli.log; }
	sed -n '/## by symbol/,$p' "$f" | grep -v '^#' | head -n 15
}
