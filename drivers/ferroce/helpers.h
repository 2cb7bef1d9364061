/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers for ferroce's Rust code: the static inlines and macros of the
 * RDMA core and the networking stack that bindgen cannot turn into callable
 * functions. Each is a one-line forwarder; there is no logic here.
 */
#ifndef FERROCE_HELPERS_H
#define FERROCE_HELPERS_H

#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

struct module *ferroce_this_module(void);
struct net *ferroce_init_net(void);

/* net_device accessors (struct net_device stays opaque to Rust) */
unsigned int ferroce_netdev_mtu(const struct net_device *ndev);
const char *ferroce_netdev_name(const struct net_device *ndev);
/* Copies up to len bytes of the hardware address; returns the address length. */
unsigned int ferroce_netdev_hwaddr(const struct net_device *ndev, u8 *buf, unsigned int len);
bool ferroce_netdev_is_vlan(const struct net_device *ndev);
bool ferroce_netdev_is_ether(const struct net_device *ndev);
bool ferroce_netdev_is_up(const struct net_device *ndev);
enum ib_port_state ferroce_port_state(struct net_device *ndev);
void ferroce_dev_put(struct net_device *ndev);
struct net_device *ferroce_notifier_info_to_dev(void *info);

/* RDMA core inlines */
enum ib_mtu ferroce_ib_mtu_int_to_enum(int mtu);
void ferroce_mark_name_assigned_by_user(struct ib_device *ibdev);
void ferroce_eui48_to_guid(__be64 *guid, const u8 *mac);
int ferroce_copy_to_udata(struct ib_udata *udata, const void *src, size_t len);
size_t ferroce_udata_outlen(const struct ib_udata *udata);
size_t ferroce_udata_inlen(const struct ib_udata *udata);

#endif
