# ferroce: the project's entry points. Everything runs as root (debootstrap,
# chroot, virtiofsd); caches live in $FERROCE_CACHE (default ~/.cache/ferroce).
#
#   make demo     boot a guest, load the module, create a device, run verbs tools
#   make check    every test: host (transport engine) and guest; ends "N passed, N failed"
#   make check-debug  the guest tests on a KASAN + lockdep + kmemleak build of the same kernel source
#   make build    the module and provider, built in the sysroot
#   make module   the module against your own CONFIG_RUST kernel: make module KDIR=/lib/modules/$(uname -r)/build
#   make bench    rdma_rxe vs ferroce, same perftest commands, in one guest (loopback) and across two guests: table, results/bench.{json,png}
#   make fuzz     a long fuzzing run of the transport engine's receive path
#   make shell    an interactive guest with the module and provider
#   make install  build and install the module and provider on this machine:
#                 make install [DESTDIR=...] [KDIR=/lib/modules/<kernel>/build]; make uninstall
#   make dkms     install the module's sources in /usr/src and build it with DKMS
#   make deb      Debian packages (ferroce-dkms, ferroce-ibverbs-provider, the stock kernel's
#                 Rust metadata) in build/deb, built in the sysroot with debhelper and dh-dkms
.PHONY: all build demo check check-debug bench module fuzz shell clean \
	install install-module install-provider install-dkms-src uninstall dkms deb

all: build

build:
	tools/build all

demo:
	tools/vm run tools/demo.sh

check:
	tools/check

check-debug:
	tools/check-debug $(TESTS)

bench:
	tools/bench

ifdef KDIR
module:
	tools/dkms-check $(KDIR)
	$(MAKE) -C $(KDIR) M=$(CURDIR)/drivers/ferroce modules
else
module:
	tools/build module
endif

# --- installing (Documentation/usage.rst, "Installing") --------------------------
# The version of the module's sources for DKMS and the packages.
VERSION := $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"$$/\1/p' $(CURDIR)/dkms.conf)
# The kernel to build for: KDIR, or the running kernel's build tree.
INSTALL_KDIR = $(or $(KDIR),/lib/modules/$(shell uname -r)/build)
INSTALL_KVER = $(or $(KVER),$(shell cat $(INSTALL_KDIR)/include/config/kernel.release 2>/dev/null),$(shell uname -r))
# libibverbs loads its providers from <libdir>/libibverbs (rdma-core's CMAKE_INSTALL_LIBDIR).
IBV_PROVIDER_DIR ?= $(shell d=$$(pkg-config --variable=libdir libibverbs 2>/dev/null); echo $${d:-/usr/lib}/libibverbs)
# depmod after installing or removing the module: on this machine, or in a
# DESTDIR that holds that kernel's whole module tree; packagers run it at install.
define run_depmod
	if [ -z "$(DESTDIR)" ]; then depmod -a $(INSTALL_KVER); \
	elif [ -e "$(DESTDIR)/lib/modules/$(INSTALL_KVER)/modules.order" ]; then depmod -b "$(DESTDIR)" -a $(INSTALL_KVER); \
	else echo "not running depmod: $(DESTDIR) has no module tree of $(INSTALL_KVER) (run depmod -a $(INSTALL_KVER) where it is installed)"; fi
endef

install: install-module install-provider

install-module:
	tools/dkms-check $(INSTALL_KDIR) $(INSTALL_KVER)
	$(MAKE) -C $(INSTALL_KDIR) M=$(CURDIR)/drivers/ferroce modules
	install -D -m 0644 drivers/ferroce/ferroce.ko $(DESTDIR)/lib/modules/$(INSTALL_KVER)/updates/ferroce.ko
	@$(run_depmod)

# The provider, named as rdma-core names its providers
# (lib<name>-rdmav<PABI>.so), and the libibverbs.d file that makes
# libibverbs load it. Building it needs rdma-core's source of the installed
# version (RDMA_CORE_SRC, see userspace/Makefile).
install-provider:
	$(MAKE) -C userspace provider
	pabi=$$($(MAKE) -s --no-print-directory -C userspace pabi) && \
	install -D -m 0644 build/userspace/libferroce-rdmav$$pabi.so $(DESTDIR)$(IBV_PROVIDER_DIR)/libferroce-rdmav$$pabi.so
	install -D -m 0644 userspace/ferroce.driver $(DESTDIR)/etc/libibverbs.d/ferroce.driver

uninstall:
	rm -f $(DESTDIR)/lib/modules/$(INSTALL_KVER)/updates/ferroce.ko
	-rmdir $(DESTDIR)/lib/modules/$(INSTALL_KVER)/updates 2>/dev/null
	rm -f $(DESTDIR)$(IBV_PROVIDER_DIR)/libferroce-rdmav*.so $(DESTDIR)/etc/libibverbs.d/ferroce.driver
	@$(run_depmod)

# The module's sources as DKMS wants them: /usr/src/ferroce-<version>/ with
# dkms.conf, drivers/ferroce, include and tools/dkms-check.
DKMS_SRC = $(DESTDIR)/usr/src/ferroce-$(VERSION)
install-dkms-src:
	rm -rf $(DKMS_SRC)
	install -D -m 0644 dkms.conf $(DKMS_SRC)/dkms.conf
	install -D -m 0755 tools/dkms-check $(DKMS_SRC)/tools/dkms-check
	find drivers/ferroce include -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' -o -name Kbuild -o -name bindgen_parameters \) \
		! -path '*/fuzz/*' ! -path '*/tests/*' ! -path '*/target/*' ! -name '*.mod.c' ! -name bindings_generated.rs | \
		LC_ALL=C sort | while read -r f; do install -D -m 0644 "$$f" "$(DKMS_SRC)/$$f" || exit 1; done

dkms:
	$(MAKE) install-dkms-src DESTDIR=
	dkms install ferroce/$(VERSION) $(if $(KDIR),-k $(INSTALL_KVER))

deb:
	tools/deb build

# cargo-fuzz needs a nightly toolchain; without one, run the stable
# randomized fuzz tests (wire parser and QP receive path) for much longer.
fuzz:
	cd drivers/ferroce/transport && if cargo +nightly --version >/dev/null 2>&1 && cargo fuzz --version >/dev/null 2>&1; then \
		cargo +nightly fuzz run parse_packet -- -max_total_time=$${FUZZ_SECONDS:-600} && \
		cargo +nightly fuzz run qp_receive -- -max_total_time=$${FUZZ_SECONDS:-600}; \
	else \
		echo "cargo-fuzz/nightly not available: running the stable randomized fuzz tests with FERROCE_FUZZ_ITERS=$${FERROCE_FUZZ_ITERS:-20000000}"; \
		FERROCE_FUZZ_ITERS=$${FERROCE_FUZZ_ITERS:-20000000} cargo test --release --test wire_fuzz --test qp_fuzz -- --nocapture; \
	fi

shell:
	tools/vm shell

clean:
	rm -rf build drivers/ferroce/transport/target
	-$(MAKE) -C drivers/ferroce -f /dev/null clean 2>/dev/null
	find drivers/ferroce -maxdepth 1 \( -name '*.o' -o -name '*.ko' -o -name '.*.cmd' -o -name '*.mod*' \
		-o -name 'modules.order' -o -name 'Module.symvers' -o -name 'bindings_generated.rs' \) -delete
