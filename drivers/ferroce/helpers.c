// SPDX-License-Identifier: GPL-2.0
/* See helpers.h: forwarders for static inlines and macros used from Rust. */
#include <linux/module.h>
#include <linux/if_vlan.h>
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>
#include "helpers.h"

struct module *ferroce_this_module(void) { return THIS_MODULE; }
struct net *ferroce_init_net(void) { return &init_net; }

unsigned int ferroce_netdev_mtu(const struct net_device *ndev) { return READ_ONCE(ndev->mtu); }
const char *ferroce_netdev_name(const struct net_device *ndev) { return ndev->name; }

unsigned int ferroce_netdev_hwaddr(const struct net_device *ndev, u8 *buf, unsigned int len)
{
	unsigned int n = min_t(unsigned int, ndev->addr_len, len);

	memcpy(buf, ndev->dev_addr, n);
	return ndev->addr_len;
}

bool ferroce_netdev_is_vlan(const struct net_device *ndev) { return is_vlan_dev(ndev); }
bool ferroce_netdev_is_ether(const struct net_device *ndev) { return ndev->type == ARPHRD_ETHER; }
bool ferroce_netdev_is_up(const struct net_device *ndev) { return netif_get_flags(ndev) & IFF_UP; }
enum ib_port_state ferroce_port_state(struct net_device *ndev) { return ib_get_curr_port_state(ndev); }
void ferroce_dev_put(struct net_device *ndev) { dev_put(ndev); }
struct net_device *ferroce_notifier_info_to_dev(void *info) { return netdev_notifier_info_to_dev(info); }

enum ib_mtu ferroce_ib_mtu_int_to_enum(int mtu) { return ib_mtu_int_to_enum(mtu); }
void ferroce_mark_name_assigned_by_user(struct ib_device *ibdev) { ib_mark_name_assigned_by_user(ibdev); }
void ferroce_eui48_to_guid(__be64 *guid, const u8 *mac) { addrconf_addr_eui48((u8 *)guid, mac); }

int ferroce_copy_to_udata(struct ib_udata *udata, const void *src, size_t len)
{
	return ib_copy_to_udata(udata, (void *)src, len);
}
size_t ferroce_udata_outlen(const struct ib_udata *udata) { return udata ? udata->outlen : 0; }
size_t ferroce_udata_inlen(const struct ib_udata *udata) { return udata ? udata->inlen : 0; }
