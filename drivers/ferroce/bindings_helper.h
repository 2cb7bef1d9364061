/* SPDX-License-Identifier: GPL-2.0 */
/* What bindgen reads to generate ferroce's bindings (bindings_generated.rs). */
#include <linux/netdevice.h>
#include <linux/notifier.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_mad.h>
#include <rdma/rdma_netlink.h>
#include <rdma/ib_cache.h>
#include <net/udp_tunnel.h>
#include "../../include/uapi/rdma/ferroce-abi.h"
#include "helpers.h"
