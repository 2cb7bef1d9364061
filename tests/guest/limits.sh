#!/bin/bash
# Issue 10: limits. userspace/tests/limits creates PDs, CQs, MRs, AHs and RC
# QPs up to the maximums ferroce advertises and one past (refused with
# ENOMEM or EINVAL), asks for a CQ, a QP queue and an SGE list one past
# their maximums, then runs 1000 RC QPs at once (500 pairs through the
# device's own address), every byte verified. Afterwards the device holds
# what it held before and the kernel logged nothing (tools/vm).
. "$(dirname "$0")/lib.sh"

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
check "RoCE v2 GID of 10.0.2.15 found" test -n "$G"
res0=$(res_of fr0)
t0=$SECONDS
timeout 900 build/userspace/tests/limits fr0 "$G" --qps "${1:-1000}" | tee /tmp/limits.log
check "limits exits 0" test "${PIPESTATUS[0]}" = 0
echo "limits took $((SECONDS - t0)) s"
check "rdma resource show: back to the starting counts ($res0)" test "$(res_of fr0)" = "$res0"
check "rdma link delete fr0" rdma link delete fr0
finish
