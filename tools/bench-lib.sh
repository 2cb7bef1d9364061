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
	"write_lat_2|usec|lower|ib_write_lat -s 2 -n 2000"
	"send_lat_2|usec|lower|ib_send_lat -s 2 -n 2000"
)

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

# bench_work CMD... LOG: what a run of perftest CMD moved, from the client's
# report in LOG: "BYTES MESSAGES" (bytes per message x iterations x QPs,
# and the messages); the latency tests report no byte count of their own
# and move one message of -s bytes per iteration each way
bench_work() {
	local log=${*: -1} s=0 n=0 q=1 prev="" a
	for a in "${@:1:$#-1}"; do
		case $prev in -s) s=$a ;; -n) n=$a ;; -q) q=$a ;; esac
		prev=$a
	done
	awk -v s="$s" -v n="$n" -v q="$q" '
		/#bytes/ && /#iterations/ { getline; if ($2 + 0 > 0) { s = $1; n = $2 } }
		END { printf "%.0f %.0f\n", s * n * q, n * q }' "$log"
}

# bench_measure RAW NAME DRV ROUND UNIT LABEL RUNNER CMD...: one measured
# run: `RUNNER DRV CMD...` runs perftest CMD (leaving the client's report in
# /tmp/cli.log, the server's in /tmp/srv.log) while the guest's busy CPU
# time is taken around it; appends "RESULT NAME DRV ROUND value" and "CPU
# NAME DRV ROUND seconds bytes messages" to RAW (a failed run: "RESULT ...
# failed"), and prints one line starting with LABEL
bench_measure() {
	local raw=$1 name=$2 drv=$3 round=$4 unit=$5 label=$6 runner=$7 c0 c1 v bytes msgs cpu
	shift 7
	c0=$(cpu_busy)
	if "$runner" "$drv" "$@"; then
		c1=$(cpu_busy)
		v=$(bench_value "$unit" /tmp/cli.log)
		read -r bytes msgs <<<"$(bench_work "$@" /tmp/cli.log)"
		cpu=$(awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
		echo "$label: $v $unit, ${cpu} CPU s for $bytes bytes, $msgs messages"
		echo "RESULT $name $drv $round $v" >>"$raw"
		echo "CPU $name $drv $round $cpu $bytes $msgs" >>"$raw"
	else
		echo "$label: FAILED"
		tail -n 5 /tmp/cli.log /tmp/srv.log
		echo "RESULT $name $drv $round failed" >>"$raw"
	fi
}
