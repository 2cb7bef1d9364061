# Shared helpers for ferroce's tools/ scripts. Sourced, not executed.
# shellcheck shell=bash

FERROCE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Caches live outside the checkout, keyed by their inputs, so a clean clone
# reuses them and a fresh machine rebuilds them.
FERROCE_CACHE=${FERROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferroce}
FERROCE_T0=${FERROCE_T0:-$(date +%s)}
export FERROCE_ROOT FERROCE_CACHE FERROCE_T0

# The stock Debian sid kernel the guest runs and the module is built for.
KVER=${KVER:-7.2.13+deb14-amd64}
KSRC_PKG=${KSRC_PKG:-linux-source-7.2}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

step() { printf '[ferroce %4ss] %s\n' "$(( $(date +%s) - FERROCE_T0 ))" "$*" >&2; }
die() { printf 'ferroce: error: %s\n' "$*" >&2; exit 1; }

need_root() {
	[ "$(id -u)" = 0 ] || die "$1 needs root (debootstrap, chroot, virtiofsd); rerun as root or with sudo"
}

# Install host packages (Debian/Ubuntu) when a command is missing.
host_pkg() { # host_pkg COMMAND PACKAGE...
	command -v "$1" >/dev/null 2>&1 && return 0
	[ -x "$1" ] && return 0
	shift
	step "installing host packages: $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null ||
		{ apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; } ||
		die "could not install host packages $*; install them by hand and rerun"
}

# Short key of a list of inputs (strings and files).
cache_key() {
	local h
	h=$( { for a in "$@"; do if [ -f "$a" ]; then cat "$a"; else printf '%s\n' "$a"; fi; done; } | sha256sum)
	printf '%s' "${h:0:12}"
}

# sysroot_apt TREE LOG PACKAGE...: apt-get install PACKAGEs into the sysroot
# TREE (update first, clean after), the output in LOG; dies naming LOG
sysroot_apt() {
	local tree=$1 log=$2; shift 2
	in_root "$tree" sh -c 'apt-get update -q && apt-get install -y -q "$@" && apt-get clean' sysroot_apt "$@" \
		>"$log" 2>&1 || die "apt-get install $* in the sysroot failed; see $log"
}

# in_root TREE COMMAND...: run COMMAND in the sysroot TREE, with /proc, /sys,
# /dev and the checkout (at /ferroce) mounted in a private mount namespace
# that disappears with the command.
in_root() {
	local tree=$1; shift
	mkdir -p "$tree/ferroce"
	unshare -m --propagation private bash -c '
		r=$1; src=$2; shift 2
		mount -t proc proc "$r/proc" && mount --rbind /sys "$r/sys" && mount --rbind /dev "$r/dev" &&
			mount --bind "$src" "$r/ferroce" || exit 1
		exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
			DEBIAN_FRONTEND=noninteractive ${FERROCE_CHROOT_ENV:-} "$@"
	' in_root "$tree" "$FERROCE_ROOT" "$@"
}
