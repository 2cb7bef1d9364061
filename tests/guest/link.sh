#!/bin/bash
# Issue 2: `rdma link add ... type ferroce`, ibv_devinfo, GIDs, port state,
# MTU, bad input, teardown. Runs inside the guest (tools/vm run).
. "$(dirname "$0")/lib.sh"

devinfo() { ibv_devinfo -v -d "$1" 2>&1; }

check_fails "module not loaded before first use" grep -q '^ferroce ' /proc/modules
check "rdma link add auto-loads the module" rdma link add fr0 type ferroce netdev eth0
check "module loaded" grep -q '^ferroce ' /proc/modules

links=$(rdma link show)
expect "rdma link show lists fr0 on eth0, ACTIVE" 'link fr0/1 state ACTIVE physical_state LINK_UP netdev eth0' "$links"
expect "ibv_devices lists fr0" 'fr0[[:space:]]+505400fffefe0001' "$(ibv_devices)"

info=$(devinfo fr0)
echo "$info"
expect "transport InfiniBand" 'transport:[[:space:]]+InfiniBand' "$info"
expect "link_layer Ethernet" 'link_layer:[[:space:]]+Ethernet' "$info"
expect "port active" 'state:[[:space:]]+PORT_ACTIVE' "$info"
expect "node GUID from the MAC (EUI-64)" 'node_guid:[[:space:]]+5054:00ff:fefe:0001' "$info"
expect "vendor_id 0xffffff (the IBTA's no-vendor value, as rdma_rxe)" 'vendor_id:[[:space:]]+0xffffff' "$info"
# SYS_IMAGE_GUID 0x800, RC_RNR_NAK_GEN 0x1000, UD_AV_PORT_ENFORCE 0x40 and
# MEM_MGT_EXTENSIONS 0x200000: what ferroce does, nothing it does not
expect "device_cap_flags: exactly what ferroce does" 'device_cap_flags:[[:space:]]+0x01223840' "$info"
expect "device_cap_flags_ex: FLUSH_GLOBAL and ATOMIC_WRITE too, nothing else" 'device_cap_flags_ex:[[:space:]]+0x14001223840' "$info"
# netdev MTU 1500 leaves room for IB MTU 1024 after RoCEv2 headers
expect "active_mtu 1024 on a 1500-byte netdev" 'active_mtu:[[:space:]]+1024 \(3\)' "$info"
expect "RoCE v2 GID for the IPv4 address" 'GID\[ *[0-9]+\]:[[:space:]]+::ffff:10\.0\.2\.15, RoCE v2' "$info"
expect "RoCE v2 GID for the IPv6 address" 'GID\[ *[0-9]+\]:[[:space:]]+fd00::15, RoCE v2' "$info"

# GIDs follow address changes
ip -6 addr add fd00::99/64 dev eth0 nodad
sleep 1
expect "GID added with a new IPv6 address" 'fd00::99, RoCE v2' "$(devinfo fr0)"
ip -6 addr del fd00::99/64 dev eth0
ip addr add 10.0.2.99/24 dev eth0
sleep 1
info=$(devinfo fr0)
check_fails "GID removed with the IPv6 address" grep -q 'fd00::99' <<<"$info"
expect "GID added with a new IPv4 address" '::ffff:10\.0\.2\.99, RoCE v2' "$info"
ip addr del 10.0.2.99/24 dev eth0

# active MTU follows the netdev MTU
ip link set eth0 mtu 1000
expect "active_mtu 512 on a 1000-byte netdev" 'active_mtu:[[:space:]]+512 \(2\)' "$(devinfo fr0)"
# a jumbo netdev: IB MTU 4096, and traffic at that path MTU (RC through
# the direct path with every byte checked, UD messages of the full MTU)
ip link set eth0 mtu 9000
expect "active_mtu 4096 on a 9000-byte netdev" 'active_mtu:[[:space:]]+4096 \(5\)' "$(devinfo fr0)"
G4=$(gid_index fr0 '::ffff:10\.0\.2\.15')
check "ibv_rc_pingpong at path MTU 4096: 200 messages of 64 KiB, data checked" \
	pingpong "" "" 10.0.2.15 ibv_rc_pingpong -d fr0 -g "$G4" -m 4096 -c -n 200 -s 65536
check "ibv_ud_pingpong at path MTU 4096: 200 messages of 4096 bytes" \
	pingpong "" "" 10.0.2.15 ibv_ud_pingpong -d fr0 -g "$G4" -n 200 -s 4096
ip link set eth0 mtu 1500

# port state follows the netdev
ip link set eth0 down
expect "port down with the netdev" 'state:[[:space:]]+PORT_DOWN' "$(devinfo fr0)"
expect "rdma link show says DOWN" 'link fr0/1 state DOWN' "$(rdma link show)"
ip link set eth0 up
sleep 1
expect "port active again" 'state:[[:space:]]+PORT_ACTIVE' "$(devinfo fr0)"

# bad input: clear errors, nothing half-made
modprobe dummy
ip link add dummy0 type dummy
ip link set dummy0 up
out=$(rdma link add fr1 type ferroce netdev eth0 2>&1); st=$?
expect "second device on the same netdev refused (EEXIST)" 'File exists' "$out"
check_fails "  ...with a failing exit status" test "$st" = 0
expect "  ...and the kernel log says why" 'cannot add fr1: netdev eth0 already has a ferroce device' "$(dmesg)"
out=$(rdma link add fr0 type ferroce netdev dummy0 2>&1)
expect "name clash refused (EEXIST)" 'File exists' "$out"
expect "  ...and the kernel log says why" 'cannot add fr0: an RDMA device of that name already exists' "$(dmesg)"
out=$(rdma link add x0 type ferroce netdev nosuchdev 2>&1)
expect "missing netdev refused (ENODEV)" 'No such device' "$out"
out=$(rdma link add x1 type ferroce netdev lo 2>&1)
expect "non-Ethernet netdev refused" 'Invalid argument' "$out"
expect "only fr0 exists after the refusals" '^1$' "$(rdma link show | wc -l)"
out=$(rdma link show; ibv_devices; ls /sys/class/infiniband)
check_fails "no half-made device" grep -Eq 'fr1|x0|x1' <<<"$out"

# a second device on another netdev, removed with its netdev
check "second device on another netdev" rdma link add fr2 type ferroce netdev dummy0
expect "  ...listed" 'link fr2/1 .*netdev dummy0' "$(rdma link show)"
ip link del dummy0
sleep 1
check_fails "device removed with its netdev" bash -c 'rdma link show | grep -q fr2'

# the provider refuses a module of another ABI version, saying so
cp /etc/libibverbs.d/ferroce.driver /tmp/ferroce.driver.orig
echo "driver /ferroce/build/userspace/abi-mismatch/libferroce" >/etc/libibverbs.d/ferroce.driver
out=$(ibv_devinfo -d fr0 2>&1); st=$?
echo "$out"
# the module's version, as the ABI header defines it
abi=$(sed -n 's/^#define FERROCE_UVERBS_ABI_VERSION \([0-9]*\)$/\1/p' /ferroce/include/uapi/rdma/ferroce-abi.h)
expect "provider refuses another ABI with a clear message" "uverbs ABI version $abi, this provider speaks version 999" "$out"
check_fails "  ...and the tool fails" test "$st" = 0
cp /tmp/ferroce.driver.orig /etc/libibverbs.d/ferroce.driver

# teardown
check "rdma link delete" rdma link delete fr0
check_fails "fr0 gone" bash -c 'rdma link show | grep -q fr0'
check "rdma link add again after delete" rdma link add fr0 type ferroce netdev eth0
check "rmmod with a device present" rmmod ferroce
check_fails "devices gone after rmmod" bash -c 'ls /sys/class/infiniband/ 2>/dev/null | grep -q .'
check "module reloads" modprobe ferroce
check "rmmod without devices" rmmod ferroce
finish
