#!/bin/bash
# Issue 17: a hostile local process (userspace/tests/security.c and
# hostile_ring.c --chain). One guest, one device, each finding of
# ../shared/reviews/security-2026-12.md that a process can reach:
#   1. PD identity: with the module's PD handle allocator started just below
#      2^32 (test_pd_start), a process allocates and frees PDs past the
#      wrap and twice round the table, then SENDs a kernel address
#      (linux_banner) with every key the kernel's DMA regions can have:
#      every attempt is refused (IBV_WC_LOC_PROT_ERR), nothing arrives;
#   4. completion events: one doorbell, one datagram to each of 6 armed
#      receivers with a CQ and completion channel each: 6 events;
#   2. use after free: peers, SRQs and CQs destroyed under traffic and
#      events (KASAN on `make check-debug` names any use of a freed one);
#   3. recursion: a chain of 256 device-local RC QPs (each one's dest_qp_num
#      the next), one SEND in every ring and one doorbell: the kernel
#      survives, the chain breaks at its first link (a QP takes packets of
#      its dest_qp_num only), X0's SEND completes unacknowledged (on the
#      kernel that recursed, the guest died here);
#   5. co-located tenants: an intruder QP that knows a victim's QPN, next
#      PSN and R_Key SENDs and WRITEs to it through the device's own
#      address: nothing lands, the victim's peer goes on;
#   7. SRQ: a QP that only got out-of-sequence packets is destroyed; the
#      SRQ still holds every WQE posted to it. A QP in the middle of a
#      message (a raw SEND_FIRST, the rest never sent) is moved to ERR (its
#      WQE completes, flushed), reset or destroyed (its WQE is back in the
#      SRQ: the next QP on it receives into it);
#   8. resize_cq: completions that waited for room in a full CQ arrive
#      after the resize, with no further traffic;
#   7. a UD QP sends through an AH of its own PD only (checked when the
#      request is taken; the check at transmit time has no test that can
#      reach it: the AH's slot would have to be reused in between);
#  10. an IPv4 header of 40 bytes (options) is IPv4, not IPv6;
#   9. the local queue's bound (module reloaded with test_local_queue_max=2);
#   6. quotas (the module loaded with user_quota=1024: the default, 64k
#      QPs or 1M MRs, is checked by limits.sh): an unprivileged process
#      takes every PD, AH, CQ, QP, SRQ and
#      MR it can (it stops at its user's quota, max_* of query_device, and a
#      second device file of the same user gets no more), and while it
#      holds them another user creates one of each, and rping (a second
#      process, and the kernel's CM with its AHs) connects; a process's CQ
#      rings are charged to its memory cgroup;
# then the device holds what it held before and the kernel logged nothing
# (tools/vm's dmesg check).
#   tools/vm run tests/guest/security.sh [UAF_SECONDS]
. "$(dirname "$0")/lib.sh"

UAF=${1:-20}
case $(uname -r) in *-debug) UAF=${1:-10} ;; esac
T=build/userspace/tests

modprobe -r ferroce 2>/dev/null
check "ferroce loads with test_pd_start=0xfffffff0 user_quota=1024" modprobe ferroce test_pd_start=0xfffffff0 user_quota=1024
check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
check "RoCE v2 GID of 10.0.2.15 found" test -n "$G"
res0=$(res_of fr0)
KVA=$(awk '$3 == "linux_banner" { print $1; exit }' /proc/kallsyms)
check "linux_banner's address from /proc/kallsyms" test -n "$KVA" -a "$KVA" != 0000000000000000

check "pdwrap: no process QP reaches the kernel's DMA region" timeout 300 $T/security pdwrap fr0 "$G" "$KVA"
check "events: 6 armed CQs reached in one pass each get their event" timeout 120 $T/security events fr0 "$G" 6
check "events: 24 armed CQs in one pass (3x what a pass records; the rest from the due list) each get their event" \
	timeout 120 $T/security events fr0 "$G" 24
check "uaf: peers, SRQs and CQs destroyed under traffic (${UAF} s)" timeout $((UAF + 120)) $T/security uaf fr0 "$G" "$UAF"
check "chain: 256 chained device-local RC QPs, one doorbell" timeout 300 $T/hostile_ring fr0 "$G" --chain 256
check "ipopts: an IPv4 header with options is taken for IPv4" timeout 60 $T/security ipopts fr0 "$G" 10.0.2.15
check "resize: completions waiting for room arrive after ibv_resize_cq" timeout 60 $T/security resize fr0 "$G"
check "cqpoll: completions waiting for room in a full CQ arrive as the process polls it" \
	timeout 60 $T/security cqpoll fr0 "$G"
check "srqkeep: SRQ WQEs are not lost to an out-of-sequence QP's destroy" timeout 120 $T/security srqkeep fr0 "$G"
for m in err reset destroy; do
	check "srqmid $m: the SRQ WQE of a message in progress is not lost" timeout 60 $T/security srqmid fr0 "$G" 10.0.2.15 $m
done
check "intrude: a co-located intruder cannot write into an RC connection" timeout 120 $T/security intrude fr0 "$G"
check "ahpd: a UD QP sends through AHs of its own PD only" timeout 60 $T/security ahpd fr0 "$G"
# 6: the hog runs as nobody (the device files opened to everyone, as common
# rdma-core setups do); it holds until its standard input closes
chmod 666 /dev/infiniband/uverbs* /dev/infiniband/rdma_cm 2>/dev/null
rm -f /tmp/hog.in; mkfifo /tmp/hog.in
setpriv --reuid=65534 --regid=65534 --clear-groups $T/security hog fr0 "$G" </tmp/hog.in >/tmp/hog.log 2>&1 &
hog=$!
exec 7>/tmp/hog.in
for i in $(seq 600); do grep -q '^holding' /tmp/hog.log && break; kill -0 $hog 2>/dev/null || break; sleep 0.1; done
cat /tmp/hog.log
expect "hog: holds its quota of PDs, AHs, CQs, QPs, SRQs and MRs" '^holding' "$(cat /tmp/hog.log)"
# memory cgroup: a process's ring memory is charged to its cgroup
memcg_run() {
	local cg=/sys/fs/cgroup
	mountpoint -q $cg || mount -t cgroup2 none $cg || return 1
	echo +memory > $cg/cgroup.subtree_control 2>/dev/null
	mkdir -p $cg/ferroce-memcg || return 1
	sh -c "echo \$\$ > $cg/ferroce-memcg/cgroup.procs && exec $T/security memcg fr0 $G 8"
	local r=$?
	rmdir $cg/ferroce-memcg
	return $r
}
check "memcg: a process's CQ rings count against its memory cgroup" memcg_run
check "neighbour: another user still creates one of each object" \
	timeout 120 setpriv --reuid=65533 --regid=65533 --clear-groups $T/security neighbour fr0 "$G"
rping_pair() {
	timeout 60 rping -s -a 10.0.2.15 -V -C 20 >/tmp/srv.log 2>&1 &
	local spid=$! i c
	for i in $(seq 300); do cm_listening $spid && break; sleep 0.1; done
	timeout 60 rping -c -a 10.0.2.15 -V -C 20 >/tmp/cli.log 2>&1
	c=$?
	wait $spid
	local s=$?
	echo "rping client exit $c, server exit $s"; tail -3 /tmp/cli.log /tmp/srv.log
	[ $c = 0 ] && [ $s = 0 ]
}
check "rping connects while an unprivileged process holds its quota" rping_pair
exec 7>&-
wait $hog
check "hog: quotas reached and everything freed" test $? = 0
check "rdma resource show: back to the starting counts ($res0)" test "$(res_of fr0)" = "$res0"
check "rdma link delete fr0" rdma link delete fr0

# 9. the local queue's bound: with room for 2, the first batch of 8 (before
# the QP's datagrams go direct) overflows it; each datagram arrives or is
# counted in tx_drop_local_full, and every send completes
modprobe -r ferroce
check "ferroce loads with test_local_queue_max=2" modprobe ferroce test_local_queue_max=2
check "the module took it (a parameter it does not know is only warned about)" grep -qx 2 /sys/module/ferroce/parameters/test_local_queue_max
check "rdma link add fr0 (local queue of 2)" rdma link add fr0 type ferroce netdev eth0
G=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
out=$(timeout 60 $T/security localq fr0 "$G" 2>&1); rc=$?
echo "$out"
check "localq: sends into a full local queue complete" test $rc = 0
arrived=$(echo "$out" | sed -n 's/^arrived //p')
full=$(rdma statistic show link fr0/1 | tr ' ' '\n' | awk '$0 == "tx_drop_local_full" { getline; print; exit }')
expect "localq: every datagram arrived ($arrived) or was counted in tx_drop_local_full ($full)" '^64$' "$((${arrived:-0} + ${full:-0}))"
check "rdma link delete fr0 (local queue of 2)" rdma link delete fr0
modprobe -r ferroce
finish
