#!/bin/bash
# Issues 10 and 20: limits and tables that grow.
# 1. The module is loaded with user_quota=9000, more than the first size of
#    every table (PD and AH 4096 slots, CQ and QP 2048, MR 8192), so that
#    userspace/tests/limits, which creates PDs, CQs, MRs, AHs and RC QPs up
#    to the maximums ferroce advertises and one past (refused with ENOMEM or
#    EINVAL), makes every table grow; it also asks for a CQ, a QP queue and
#    an SGE list one past their maximums, then runs 1000 RC QPs at once (500
#    pairs through the device's own address), every byte verified.
# 2. The module again with its default quotas (64k QPs, CQs, AHs and PDs,
#    1M MRs per user, as query_device reports): 16384 RC QPs live at once
#    in one process (the QP table grows from 2048 slots to 32768), each
#    sending one verified message to its peer.
# Afterwards the device holds what it held before and the kernel logged
# nothing (tools/vm).
#   tools/vm run tests/guest/limits.sh [QPS [SCALE_QPS]]
. "$(dirname "$0")/lib.sh"

T=build/userspace/tests
modprobe -r ferroce 2>/dev/null
check "ferroce loads with user_quota=9000" modprobe ferroce user_quota=9000
check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0
G=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
check "RoCE v2 GID of 10.0.2.15 found" test -n "$G"
res0=$(res_of fr0)
info=$(ibv_devinfo -v -d fr0)
expect "user_quota=9000: query_device reports max_qp 9000" 'max_qp:[[:space:]]+9000$' "$info"
expect "user_quota=9000: query_device reports max_mr 9000" 'max_mr:[[:space:]]+9000$' "$info"
t0=$SECONDS
timeout 900 $T/limits fr0 "$G" --qps "${1:-1000}" | tee /tmp/limits.log
check "limits exits 0" test "${PIPESTATUS[0]}" = 0
echo "limits took $((SECONDS - t0)) s"
check "rdma resource show: back to the starting counts ($res0)" test "$(res_of fr0)" = "$res0"
check "rdma link delete fr0" rdma link delete fr0
check "ferroce unloads" modprobe -r ferroce

check "ferroce loads with its default quotas" modprobe ferroce
check "rdma link add fr0 (default quotas)" rdma link add fr0 type ferroce netdev eth0
G=$(wait_gid fr0 '::ffff:10\.0\.2\.15')
check "RoCE v2 GID of 10.0.2.15 found (default quotas)" test -n "$G"
res0=$(res_of fr0)
info=$(ibv_devinfo -v -d fr0)
for k in max_qp:65536 max_cq:65536 max_pd:65536 max_ah:65536 max_mr:1048576 max_srq:32768; do
	expect "query_device reports ${k%%:*} ${k#*:}" "${k%%:*}:[[:space:]]+${k#*:}\$" "$info"
done
n=${2:-16384}
t0=$SECONDS
timeout 900 $T/limits fr0 "$G" --no-limits --qps "$n" --msgs 1 --msg 1024 | tee /tmp/limits16k.log
check "limits --qps $n exits 0" test "${PIPESTATUS[0]}" = 0
echo "$n QPs took $((SECONDS - t0)) s"
check "rdma resource show: back to the starting counts after $n QPs ($res0)" test "$(res_of fr0)" = "$res0"
check "rdma link delete fr0 (default quotas)" rdma link delete fr0
finish
