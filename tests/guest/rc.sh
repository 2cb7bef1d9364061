#!/bin/bash
# Issue 5: RC over one ferroce device (loopback through the guest's own
# address): ibv_rc_pingpong with buffer validation, and perftest's RC tests
# (send, write, read, atomics; bandwidth over all sizes, latency). Issue 19:
# UC (ibv_uc_pingpong, perftest -c UC) and the extended verbs API
# (userspace/tests/wr_ex.c, RC and UD).
. "$(dirname "$0")/lib.sh"

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G=$(gid_index fr0 '::ffff:10\.0\.2\.15')
G6=$(gid_index fr0 'fd00::15')
info=$(ibv_devinfo -v -d fr0)
expect "query_device reports read/atomic resources" 'max_qp_rd_atom:[[:space:]]+[1-9]' "$info"
expect "query_device reports atomics" 'atomic_cap:[[:space:]]+ATOMIC_HCA' "$info"

check "ibv_rc_pingpong -c: 1000 x 4 KiB, buffers validated" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G" -c -n 1000 -s 4096
expect "  ...1000 iterations" '^1000 iters in' "$(cat /tmp/cli.log)"
PP_TIMEOUT=1200 check "ibv_rc_pingpong -c: 1000 x 1 MiB, buffers validated" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G" -c -n 1000 -s 1048576
expect "  ...1000 iterations" '^1000 iters in' "$(cat /tmp/cli.log)"
check "ibv_rc_pingpong -c over IPv6 GIDs: 200 x 64 KiB" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G6" -c -n 200 -s 65536

# UC (issue 19): SEND and WRITE without acknowledgements; on this loss-free
# loopback every message arrives, and ibv_uc_pingpong checks every byte
check "ibv_uc_pingpong -c: 500 x 4 KiB, buffers validated" \
	pingpong "" "" 10.0.2.15 ibv_uc_pingpong -d fr0 -g "$G" -c -n 500 -s 4096
expect "  ...500 iterations" '^500 iters in' "$(cat /tmp/cli.log)"
for t in ib_send_bw ib_write_bw; do
	check "$t -c UC -a (2 B .. 8 MiB, 20 iterations each)" \
		pingpong "" "" 10.0.2.15 $t -d fr0 -x "$G" -c UC -a -n 20
	expect "  ...reached 1 MiB" '^ *1048576 +20 ' "$(cat /tmp/cli.log)"
done
for t in ib_send_lat ib_write_lat; do
	check "$t -c UC (2 bytes, 500 iterations)" pingpong "" "" 10.0.2.15 $t -d fr0 -x "$G" -c UC -s 2 -n 500
	expect "  ...every iteration counted" '^ *2 +500 ' "$(cat /tmp/cli.log)"
done

# perftest: bandwidth tests over every size from 2 bytes (-a: 2 B .. 8 MiB),
# latency tests at their default size
for t in ib_send_bw ib_write_bw ib_read_bw; do
	check "$t -a (2 B .. 8 MiB, 20 iterations each)" \
		pingpong "" "" 10.0.2.15 $t -d fr0 -x "$G" -a -n 20
	expect "  ...reached 1 MiB" '^ *1048576 +20 ' "$(cat /tmp/cli.log)"
done
for a in CMP_AND_SWAP FETCH_AND_ADD; do
	check "ib_atomic_bw -A $a" pingpong "" "" 10.0.2.15 ib_atomic_bw -d fr0 -x "$G" -A $a -n 500
	expect "  ...every iteration counted" '^ *8 +500 ' "$(cat /tmp/cli.log)"
	check "ib_atomic_lat -A $a" pingpong "" "" 10.0.2.15 ib_atomic_lat -d fr0 -x "$G" -A $a -n 200
	expect "  ...every iteration counted" '^ *8 +200 ' "$(cat /tmp/cli.log)"
done
for t in ib_send_lat ib_write_lat ib_read_lat; do
	check "$t (2 bytes, 500 iterations)" pingpong "" "" 10.0.2.15 $t -d fr0 -x "$G" -s 2 -n 500
	expect "  ...every iteration counted" '^ *2 +500 ' "$(cat /tmp/cli.log)"
done
# Completion events (completion channels, req_notify_cq, the core's
# completion handler) instead of busy polling
check "ibv_rc_pingpong -e (events): 200 x 4 KiB" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G" -e -c -n 200 -s 4096
check "ib_send_bw -e (events)" pingpong "" "" 10.0.2.15 ib_send_bw -d fr0 -x "$G" -e -s 4096 -n 500
expect "  ...every iteration counted" '^ *4096 +500 ' "$(cat /tmp/cli.log)"
check "ib_send_lat -e (events)" pingpong "" "" 10.0.2.15 ib_send_lat -d fr0 -x "$G" -e -s 2 -n 200
expect "  ...every iteration counted" '^ *2 +200 ' "$(cat /tmp/cli.log)"
# Shared receive queue: 16 RC QPs take their receives from one SRQ
check "ibv_srq_pingpong (16 QPs on one SRQ, 200 x 4 KiB)" \
	pingpong "" "" 10.0.2.15 ibv_srq_pingpong -d fr0 -g "$G" -n 200 -s 4096
expect "  ...200 iterations" '^200 iters in' "$(cat /tmp/cli.log)"
# The extended verbs API: ibv_create_qp_ex with send_ops_flags and every
# ibv_wr_* operation on RC and UD, ibv_create_cq_ex with ibv_start_poll and
# the read_* getters, wr_abort and the errors of bad input (the program's own
# ok/not ok lines count one check each)
check "the extended verbs API: ibv_wr_* on RC, UC and UD, extended CQs (wr_ex)" \
	build/userspace/tests/wr_ex fr0 "$G"
# Affiliated asynchronous events: last WQE reached (a QP on an SRQ in ERR),
# SQ drained, and the responder's access and invalid-request errors
check "QP asynchronous events (qp_events)" build/userspace/tests/qp_events fr0 "$G"
# Memory windows (issue 20): type 1 and 2B, bound by ibv_bind_mw, post_send
# and ibv_wr_bind_mw; remote access through them and each refusal (range,
# rights, old key, another QP), invalidation by LOCAL_INV and SEND with
# Invalidate, the bind errors, EBUSY deregistration, a process exiting with
# bound windows
check "memory windows (mw)" build/userspace/tests/mw fr0 "$G"
# Memory on demand (issue 20): registration faults nothing in; SEND, WRITE,
# READ and atomics between regions whose pages are dropped before each
# round (the MMU notifier, the RNR NAK and the requester's wait, the fault
# work); a UD send; ibv_advise_mr and its errors; an unmapped region's
# SEND fails with a local protection error
check "memory on demand (odp)" build/userspace/tests/odp fr0 "$G"
# An SRQ resized with receives posted: they stay, in order, and the new
# size holds more
check "SRQ resize with receives pending (srq_resize)" build/userspace/tests/srq_resize fr0 "$G"
# Inline sends on RC (ibv_rc_pingpong uses them when the message fits)
check "ibv_rc_pingpong -c with 32-byte messages (inline)" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G" -c -n 200 -s 32
# The device-local path (design, "Local fast path": packets built and
# received under one hold of the lock) with gather and scatter lists:
# every byte of SEND, WRITE and READ checked, with guard bytes, each
# request's buffer and each receive buffer cut into up to 12 SGEs at
# seeded points, so that packets begin and end inside entries; atomics
# between them.
check "rc_integrity fr0<->fr0, up to 12 SGEs a buffer: every byte checked" \
	timeout 300 build/userspace/tests/rc_integrity fr0 "$G" fr0 "$G" --qps 2 --ops 400 --sges 12 --max-size 20000

# The send continuation's priority (design, "Transmit"): 4 QPs of 4 KiB
# sends keep continuations queued. By default a continuation runs at high
# priority for qp_hi_us (2 ms), then rests at normal priority for qp_lo_us,
# so both kinds of run are counted; and a process that wants a fifth of a
# CPU, pinned to each CPU in turn beside the stream (cpu_share: 20 ms of
# CPU every 100 ms), still gets most of its rounds. qp_hi_us=0: never high;
# qp_lo_us=0: never rests.
PRM=/sys/module/ferroce/parameters
# cont_run HI_US LO_US: a 3-second stream at that setting; sets HIGH and
# NORMAL to the continuation runs of each kind it counted
cont_run() {
	echo "$1" >$PRM/qp_hi_us && echo "$2" >$PRM/qp_lo_us || return 1
	local h0 n0
	h0=$(counter fr0 tx_cont_high); n0=$(counter fr0 tx_cont_normal)
	pingpong "" "" 10.0.2.15 ib_send_bw -d fr0 -x "$G" -s 4096 -q 4 -D 3 >/tmp/cont.log || { cat /tmp/cont.log; return 1; }
	HIGH=$(( $(counter fr0 tx_cont_high) - h0 )); NORMAL=$(( $(counter fr0 tx_cont_normal) - n0 ))
	echo "qp_hi_us=$1 qp_lo_us=$2: $HIGH runs at high priority, $NORMAL at normal"
}
check "module parameters qp_hi_us and qp_lo_us default to 2000" \
	test "$(cat $PRM/qp_hi_us) $(cat $PRM/qp_lo_us)" = "2000 2000"
taskset -c 0 build/userspace/tests/cpu_share 5 100 20 >/tmp/share0.log &
SH0=$!
taskset -c 1 build/userspace/tests/cpu_share 5 100 20 >/tmp/share1.log &
SH1=$!
check "a saturated stream at the default budget (ib_send_bw -q 4 -D 3)" cont_run 2000 2000
wait $SH0 $SH1
cat /tmp/share0.log /tmp/share1.log
check "  ...its continuations ran at high priority and rested at normal" test "$HIGH" -gt 0 -a "$NORMAL" -gt 0
for c in 0 1; do
	check "  ...a process pinned to CPU $c got at least 35 of its 50 rounds" \
		test "$(awk '{ print $2 }' /tmp/share$c.log)" -ge 35
done
check "qp_hi_us=0: a stream" cont_run 0 2000
check "  ...no continuation ran at high priority" test "$HIGH" = 0 -a "$NORMAL" -gt 0
check "qp_lo_us=0: a stream" cont_run 2000 0
check "  ...no continuation rested at normal priority" test "$NORMAL" = 0 -a "$HIGH" -gt 0
echo 2000 >$PRM/qp_hi_us; echo 2000 >$PRM/qp_lo_us

rdma statistic show link fr0/1
check "rdma link delete fr0" rdma link delete fr0
check "rmmod ferroce after the tests" rmmod ferroce
finish
