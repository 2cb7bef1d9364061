/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR Linux-OpenIB) */
/*
 * ferroce-abi.h: the one contract between the ferroce kernel module and its
 * rdma-core provider (libferroce). Both sides generate their Rust from this
 * file with bindgen; nothing here may depend on anything but linux/types.h.
 *
 * Bump FERROCE_UVERBS_ABI_VERSION on any incompatible change: the module
 * reports it as the uverbs device's abi_version and the provider refuses a
 * module whose version differs from its own.
 */
#ifndef FERROCE_ABI_USER_H
#define FERROCE_ABI_USER_H

#include <linux/types.h>

#define FERROCE_UVERBS_ABI_VERSION 1

/*
 * ferroce's private rdma_driver_id. Unused by any in-tree driver: a shared
 * id would let another driver's unregistration remove our devices.
 */
#define FERROCE_DRIVER_ID 0x4652

/* The RDMA link type: `rdma link add NAME type ferroce netdev DEV`. */
#define FERROCE_LINK_TYPE "ferroce"

/* Response to alloc_ucontext (udata). */
struct ferroce_alloc_ucontext_resp {
	__u32 abi_version;	/* FERROCE_UVERBS_ABI_VERSION of the module */
	__u32 reserved;
};

#endif /* FERROCE_ABI_USER_H */
