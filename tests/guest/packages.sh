#!/bin/bash
# Issue 22: ferroce installed like a real driver. Runs in a guest booted by
# `tools/deb test` from a tree that has never seen the checkout's build: a
# copy of the sysroot without the stock kernel's Rust metadata, into which
# apt installed the packages of `make deb` (ferroce-dkms, whose module DKMS
# built there for the stock kernel; ferroce-ibverbs-provider;
# linux-rust-metadata-<kernel>). tools/guest-init loads nothing from the
# checkout (ferroce_stock=1). Checks the module DKMS installed, its
# auto-loading by `rdma link add`, the packaged provider under ibv_devinfo and
# perftest, then that apt remove and purge leave no file of them behind.
# Not a test of the ordinary guest: tools/check runs it through tools/deb test.
. "$(dirname "$0")/lib.sh"
KVER=$(uname -r)
KRE=${KVER//./\\.}; KRE=${KRE//+/\\+} # KVER as an extended regex
PKGS="ferroce-dkms ferroce-ibverbs-provider linux-rust-metadata-$KVER"

check "booted with ferroce_stock=1 (nothing of the checkout's build loaded)" grep -qw 'ferroce_stock=1' /proc/cmdline
check "the three packages are installed" dpkg-query -W $PKGS
check "no provider of the checkout's build configured" bash -c '! grep -rq /ferroce /etc/libibverbs.d/'
expect "dkms status: ferroce installed for $KVER" "^ferroce/[^,]*, $KRE, [^:]*: installed" "$(dkms status -k "$KVER" 2>&1)"
mod=$(modinfo -n ferroce 2>&1)
expect "modinfo finds the module DKMS installed (updates/dkms)" "^/(usr/)?lib/modules/$KRE/updates/dkms/ferroce\.ko" "$mod"
expect "the module's vermagic is the stock kernel's" "^vermagic: +$KRE " "$(modinfo ferroce 2>&1)"
expect "its alias makes rdma link add load it" '^alias: +rdma-link-ferroce' "$(modinfo ferroce 2>&1)"

check "modprobe ferroce" modprobe ferroce
check "module loaded" grep -q '^ferroce ' /proc/modules
check "modprobe -r ferroce" modprobe -r ferroce
check_fails "module unloaded" grep -q '^ferroce ' /proc/modules
check "rdma link add fr0 type ferroce (the module loads itself)" rdma link add fr0 type ferroce netdev eth0
check "module auto-loaded by rdma link add" grep -q '^ferroce ' /proc/modules

prov=$(ls /usr/lib/*/libibverbs/libferroce-rdmav*.so 2>/dev/null)
expect "the packaged provider is in libibverbs' provider directory" 'libibverbs/libferroce-rdmav[0-9]+\.so$' "$prov"
expect "/etc/libibverbs.d/ferroce.driver names it" '^driver ferroce$' "$(cat /etc/libibverbs.d/ferroce.driver 2>&1)"
info=$(strace -f -e trace=openat -o /tmp/devinfo.strace ibv_devinfo -v -d fr0 2>&1)
echo "$info"
expect "ibv_devinfo drives fr0: port active" 'state:[[:space:]]+PORT_ACTIVE' "$info"
expect "ibv_devinfo opened the packaged provider" "\"${prov//./\\.}\", [^)]*\) = [0-9]" "$(cat /tmp/devinfo.strace)"
G4=$(gid_index fr0 '::ffff:10\.0\.2\.15')
check "ib_send_bw RC (1000 iterations at 64 KiB) through the packaged provider" \
	pingpong "" "" 10.0.2.15 ib_send_bw -d fr0 -x "$G4" -n 1000 -s 65536
check "rdma link delete fr0" rdma link delete fr0
check "rmmod ferroce" rmmod ferroce

# apt remove, then purge: every file the packages installed, the module
# DKMS built and DKMS's tree of it must be gone. (The guest mounts tmpfs
# over apt's state and logs: give apt the directories it expects.)
mkdir -p /var/lib/apt/lists/partial /var/cache/apt/archives/partial /var/log/apt
files=$(dpkg-query -L $PKGS 2>/dev/null | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done)
echo "--- $(wc -l <<<"$files") files of the packages"
check "apt-get remove the three packages" apt-get remove -y $PKGS
# ferroce.driver is the packages' one conffile: only its package is left,
# in state rc, for purge (apt knows no other: the guest has no package lists)
rc=$(dpkg-query -W -f='${db:Status-Abbrev}${Package}\n' $PKGS 2>/dev/null | sed -n 's/^rc *//p')
expect "after remove, only the provider's package is left, with its conffile (rc)" '^ferroce-ibverbs-provider$' "$rc"
check "apt-get purge it" apt-get purge -y $rc
left=$(while read -r f; do [ -n "$f" ] && { [ -e "$f" ] || [ -L "$f" ]; } && echo "$f"; done <<<"$files")
expect "no file of the packages is left" '^$' "$left"
expect "no package of them left, in any state" '^$' "$(dpkg -l $PKGS 2>/dev/null | grep -E '^[a-z][^n] ')"
check_fails "no ferroce module left in /lib/modules/$KVER" bash -c "find /lib/modules/$KVER -name 'ferroce.ko*' | grep ."
check_fails "no DKMS tree of ferroce left (/var/lib/dkms/ferroce)" test -e /var/lib/dkms/ferroce
check_fails "no sources left (/usr/src/ferroce-*)" bash -c 'ls -d /usr/src/ferroce-* 2>/dev/null | grep .'
check_fails "modprobe no longer finds ferroce" modinfo ferroce
check_fails "no Rust metadata left in the headers tree" bash -c "ls /usr/src/linux-headers-$KVER/rust/*.rmeta 2>/dev/null | grep ."
finish
