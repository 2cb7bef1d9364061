#!/bin/bash
# The main job, run inside a guest by `make demo`: create a ferroce device on
# the guest's Ethernet device and show it to the verbs tools.
set -e
banner() { printf '\n==== %s\n' "$*"; }
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
banner "rdma link delete fr0; rmmod ferroce"
rdma link delete fr0
rmmod ferroce
banner "kernel log"
dmesg | grep -E 'ferroce|fr0' || true
