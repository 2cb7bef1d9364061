#!/bin/bash
# Issue 9: a kernel ULP on ferroce. NVMe over RDMA (nvmet-rdma target and
# nvme-rdma host, both in this guest, over fr0's IPv4 address) needs the
# memory management extensions: alloc_mr/map_mr_sg, IB_WR_REG_MR,
# IB_WR_LOCAL_INV and SEND with Invalidate. 64 MiB written with O_DIRECT
# through the fabric and read back must compare equal.
# Issue 20: then a controller with 32 I/O queues (16 read and 16 write
# queues: the host makes at most one queue of each kind per CPU, hence the
# guest's 16 CPUs below), each queue a QP, a CQ and a pool of one
# fast-registration MR per entry (256 asked; nvmet grants 128: about 4,100
# MRs, what the issue's 32-CPU host wants), with 16 writers and 16 readers
# on 16 CPUs at once.
# ferroce-vm: smp=16
. "$(dirname "$0")/lib.sh"

ADDR=10.0.2.15
PORT=4420
NQN=nqn.2026-01.org.ferroce:nvme-test
CFG=/sys/kernel/config/nvmet

check "rdma link add fr0" rdma link add fr0 type ferroce netdev eth0

mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
check "configfs mounted" mountpoint -q /sys/kernel/config
# 1 GiB of null_blk storage, memory backed (memory_backed=1: reads return
# what was written).
check "null_blk loads" modprobe null_blk nr_devices=1 gb=1 memory_backed=1
check "nvmet, nvmet-rdma, nvme-rdma load" modprobe -a nvmet nvmet-rdma nvme-rdma

# The target: a subsystem any host may connect to, namespace 1 on
# /dev/nullb0, an RDMA port on fr0's IPv4 address.
setup_target() {
	mkdir "$CFG/subsystems/$NQN" &&
		echo 1 >"$CFG/subsystems/$NQN/attr_allow_any_host" &&
		mkdir "$CFG/subsystems/$NQN/namespaces/1" &&
		echo -n /dev/nullb0 >"$CFG/subsystems/$NQN/namespaces/1/device_path" &&
		echo 1 >"$CFG/subsystems/$NQN/namespaces/1/enable" &&
		mkdir "$CFG/ports/1" &&
		echo rdma >"$CFG/ports/1/addr_trtype" &&
		echo ipv4 >"$CFG/ports/1/addr_adrfam" &&
		echo "$ADDR" >"$CFG/ports/1/addr_traddr" &&
		echo "$PORT" >"$CFG/ports/1/addr_trsvcid" &&
		ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
}
check "nvmet subsystem with /dev/nullb0 and an RDMA port on $ADDR:$PORT" setup_target
dmesg | grep -i nvmet | tail -3

# The host: nvme-cli's `nvme connect -t rdma -a ADDR -s PORT -n NQN`
# (tools/sysroot.packages-added), which writes the options to
# /dev/nvme-fabrics and reads back the new controller's instance; without
# nvme-cli in the tree, the same by hand.
connect() {
	if command -v nvme >/dev/null; then
		nvme connect -t rdma -a "$ADDR" -s "$PORT" -n "$NQN" || return 1
		CTRL=$(basename "$(dirname "$(grep -lx "$NQN" /sys/class/nvme/nvme*/subsysnqn | head -1)")")
		echo "connected: $CTRL"
		[ -n "$CTRL" ] && [ "$CTRL" != . ]
		return
	fi
	local r
	exec 3<>/dev/nvme-fabrics || return 1
	echo "transport=rdma,traddr=$ADDR,trsvcid=$PORT,nqn=$NQN" >&3 || { exec 3>&-; return 1; }
	read -r r <&3
	exec 3>&-
	echo "connected: $r"
	CTRL=$(sed -n 's/.*instance=\([0-9]*\).*/nvme\1/p' <<<"$r")
	[ -n "$CTRL" ]
}
CTRL=
check "nvme-rdma connects to the target over fr0" connect
dmesg | grep -iE 'nvme|rdma' | tail -5
check "nvme-rdma did not refuse fr0 (memory registrations)" sh -c "! dmesg | grep -q 'Memory registrations not supported'"
# The namespace's block device: nvme0n1 (with native multipath the path
# device nvme0c0n1 in /sys/class/nvme/nvme0 has no /dev node); waits up to
# 10 s for it and sets DEV (empty when none came).
find_namespace() {
	DEV=
	local b
	for _ in $(seq 100); do
		for b in /sys/block/nvme*n*; do
			[[ $(basename "$b") =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/$(basename "$b")" ] && DEV=/dev/$(basename "$b")
		done
		[ -n "$DEV" ] && break
		sleep 0.1
	done
}
find_namespace
echo "controller $CTRL, namespace ${DEV:-none}"
check "the namespace appears as a block device" test -b "$DEV"
[ -b "$DEV" ] || DEV=/nonexistent/nvme
expect "transport is rdma" '^rdma$' "$(cat /sys/class/nvme/"$CTRL"/transport 2>&1)"

# 64 MiB of a deterministic pattern: 16-byte lines, every one different, so
# a misplaced page or a stale buffer shows.
seq -f '%015g' 1 4194304 >/tmp/pattern
check "pattern is 64 MiB" test "$(stat -c %s /tmp/pattern)" = 67108864
t0=$(date +%s.%N)
check "write 64 MiB with O_DIRECT through NVMe/RDMA" dd if=/tmp/pattern of="$DEV" bs=1M count=64 oflag=direct status=none
t1=$(date +%s.%N)
check "read 64 MiB back with O_DIRECT" dd if="$DEV" of=/tmp/readback bs=1M count=64 iflag=direct status=none
t2=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "64 MiB write: %.2f s (%.1f MB/s), read: %.2f s (%.1f MB/s)\n", b - a, 67.108864 / (b - a), c - b, 67.108864 / (c - b) }'
check "data read back equals data written" cmp /tmp/pattern /tmp/readback
# Smaller, unaligned-in-the-device requests (4 KiB and 12 KiB at odd
# offsets: single pages and short page lists).
check "4 KiB and 12 KiB direct writes at other offsets" bash -c \
	"dd if=/tmp/pattern of=$DEV bs=4k count=1 seek=100003 oflag=direct status=none &&
	 dd if=/tmp/pattern of=$DEV bs=12k count=3 seek=40001 oflag=direct status=none"
head -c 4096 /tmp/pattern >/tmp/p4k
head -c 36864 /tmp/pattern >/tmp/p36k
check "  ...and read back equal" bash -c \
	"dd if=$DEV bs=4k count=1 skip=100003 iflag=direct status=none | cmp - /tmp/p4k &&
	 dd if=$DEV bs=12k count=3 skip=40001 iflag=direct status=none | cmp - /tmp/p36k"
# Both I/O queues at once: two readers of the two halves.
check "two concurrent 32 MiB direct reads equal what was written" bash -c \
	"dd if=$DEV of=/tmp/r1 bs=256k count=128 iflag=direct status=none &
	 dd if=$DEV of=/tmp/r2 bs=256k count=128 skip=128 iflag=direct status=none &
	 wait && cat /tmp/r1 /tmp/r2 | cmp - /tmp/pattern"
rm -f /tmp/r1 /tmp/r2 /tmp/p4k /tmp/p36k
rm -f /tmp/readback

stats=$(rdma statistic show link fr0/1)
echo "$stats"
expect "packets went through fr0" '(tx_packets|tx_local) [1-9][0-9]{4}' "$stats"

if command -v nvme >/dev/null; then
	check "nvme disconnect -n $NQN" nvme disconnect -n "$NQN"
else
	check "disconnect (delete_controller)" sh -c "echo 1 >/sys/class/nvme/$CTRL/delete_controller"
fi
for _ in $(seq 100); do
	[ -e "/sys/class/nvme/$CTRL" ] || break
	sleep 0.1
done
check "  ...the controller is gone" test ! -e "/sys/class/nvme/$CTRL"

# 32 I/O queues on one ferroce device.
res_before=$(rdma resource show | grep ' fr0: ')
connect32() {
	nvme connect -t rdma -a "$ADDR" -s "$PORT" -n "$NQN" --nr-io-queues=16 --nr-write-queues=16 \
		--queue-size=256 || return 1
	CTRL=$(basename "$(dirname "$(grep -lx "$NQN" /sys/class/nvme/nvme*/subsysnqn | head -1)")")
	echo "connected: $CTRL"
	[ -n "$CTRL" ] && [ "$CTRL" != . ]
}
if command -v nvme >/dev/null; then
	check "nvme connect with 16 read and 16 write queues of 256 entries (${CPUS:=$(nproc)} CPUs)" connect32
	dmesg | grep -E 'nvme nvme[0-9]+: (creating|mapped)' | tail -2
	expect "  ...the host creates 32 I/O queues" 'creating 32 I/O queues' "$(dmesg | grep 'I/O queues' | tail -1)"
	res=$(rdma resource show | grep ' fr0: ')
	echo "fr0 before: $res_before"
	echo "fr0 now:    $res"
	qps=$(sed -n 's/.* qp \([0-9]*\) .*/\1/p' <<<"$res")
	mrs=$(sed -n 's/.* mr \([0-9]*\) .*/\1/p' <<<"$res")
	check "  ...host and target hold 66 QPs or more on fr0 (33 each): $qps" test "${qps:-0}" -ge 66
	check "  ...and 4096 MRs or more (128 per I/O queue): $mrs" test "${mrs:-0}" -ge 4096
	find_namespace
	[ -b "$DEV" ] || DEV=/nonexistent/nvme
	# Each CPU writes and reads back its own 4 MiB slice of a fresh pattern
	# (offset by 64 MiB: nothing above was there).
	seq -f '%015g' 5000001 9194304 >/tmp/pattern2
	many_io() {
		local i pids=() st=0
		for i in $(seq 0 15); do
			taskset -c $((i % CPUS)) dd if=/tmp/pattern2 of="$DEV" bs=64k count=64 skip=$((i * 64)) \
				seek=$((1024 + i * 64)) oflag=direct status=none &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || st=1; done
		pids=()
		for i in $(seq 0 15); do
			taskset -c $(((i + 1) % CPUS)) dd if="$DEV" of=/tmp/slice.$i bs=64k count=64 skip=$((1024 + i * 64)) \
				iflag=direct status=none &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || st=1; done
		for i in $(seq 0 15); do cat /tmp/slice.$i; done | cmp - /tmp/pattern2 || st=1
		rm -f /tmp/slice.*
		return $st
	}
	check "16 writers then 16 readers on 16 CPUs: 64 MiB through 32 queues, read back equal" many_io
	rm -f /tmp/pattern2
	check "nvme disconnect -n $NQN (32 queues)" nvme disconnect -n "$NQN"
	for _ in $(seq 100); do
		[ -e "/sys/class/nvme/$CTRL" ] || break
		sleep 0.1
	done
	check "  ...the controller is gone" test ! -e "/sys/class/nvme/$CTRL"
fi

teardown_target() {
	rm -f "$CFG/ports/1/subsystems/$NQN" &&
		rmdir "$CFG/ports/1" &&
		echo 0 >"$CFG/subsystems/$NQN/namespaces/1/enable" &&
		rmdir "$CFG/subsystems/$NQN/namespaces/1" &&
		rmdir "$CFG/subsystems/$NQN"
}
check "nvmet configuration removed" teardown_target
check "nvme-rdma and nvmet-rdma unload" modprobe -r nvme-rdma nvmet-rdma
check "rdma link delete fr0" rdma link delete fr0
warn=$(dmesg | grep -E 'WARNING|BUG|Oops|refcount_t' || true)
check "no WARN/BUG in dmesg" test -z "$warn"
[ -n "$warn" ] && echo "$warn" | head
finish
