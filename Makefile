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
.PHONY: all build demo check check-debug bench module fuzz shell clean

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
	$(MAKE) -C $(KDIR) M=$(CURDIR)/drivers/ferroce modules
else
module:
	tools/build module
endif

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
