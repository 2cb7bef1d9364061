#!/bin/bash
# The main job, run inside a guest by `make demo`: create a ferroce device on
# the guest's Ethernet device, show it to the verbs tools and move data
# through it with perftest (server and client in the guest, over the guest's
# own IPv4 address).
set -e
. "$(dirname "$0")/../tests/guest/lib.sh"
banner() { printf '\n==== %s\n' "$*"; }
# perf NAME ARGS...: a perftest server and client; shows the client's report
perf() {
	banner "$*"
	if pingpong "" "" 10.0.2.15 "$@" >/tmp/perf.out 2>&1; then
		sed -n '/^--- client/,/^--- server/p' /tmp/perf.out | sed '1d;$d'
	else
		cat /tmp/perf.out
		return 1
	fi
}

banner "netdev eth0"
ip -br addr show eth0
banner "rdma link add fr0 type ferroce netdev eth0   (auto-loads ferroce.ko)"
rdma link add fr0 type ferroce netdev eth0
banner "rdma link show"
rdma link show
banner "ibv_devices"
ibv_devices
banner "ibv_devinfo -v -d fr0"
ibv_devinfo -v -d fr0
G=$(gid_index fr0 '::ffff:10\.0\.2\.15')
perf ib_send_bw -d fr0 -x "$G" -c UD -s 1024 -n 2000
perf ib_send_lat -d fr0 -x "$G" -c UD -s 2 -n 1000
perf ib_send_bw -d fr0 -x "$G" -s 65536 -n 500
perf ib_write_lat -d fr0 -x "$G" -s 2 -n 1000
banner "rdma statistic show link fr0/1"
rdma statistic show link fr0/1
banner "rdma link delete fr0; rmmod ferroce"
rdma link delete fr0
rmmod ferroce
banner "kernel log"
dmesg | grep -E 'ferroce|fr0' || true
