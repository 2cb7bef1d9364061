// SPDX-License-Identifier: GPL-2.0
/* See helpers.h: forwarders for static inlines and macros used from Rust. */
#include <linux/module.h>
#include <linux/if_vlan.h>
#include <net/addrconf.h>
#include <linux/igmp.h>
#include <linux/inetdevice.h>
#include <rdma/ib_verbs.h>
#include "helpers.h"

struct net *ferroce_init_net(void) { return &init_net; }

unsigned int ferroce_netdev_mtu(const struct net_device *ndev) { return READ_ONCE(ndev->mtu); }
const char *ferroce_netdev_name(const struct net_device *ndev) { return ndev->name; }

unsigned int ferroce_netdev_hwaddr(const struct net_device *ndev, u8 *buf, unsigned int len)
{
	unsigned int n = min_t(unsigned int, ndev->addr_len, len);

	memcpy(buf, ndev->dev_addr, n);
	return ndev->addr_len;
}

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
int ferroce_copy_from_udata(void *dst, struct ib_udata *udata, size_t len)
{
	return ib_copy_from_udata(dst, udata, len);
}
size_t ferroce_udata_outlen(const struct ib_udata *udata) { return udata ? udata->outlen : 0; }
size_t ferroce_udata_inlen(const struct ib_udata *udata) { return udata ? udata->inlen : 0; }

#include <linux/hash.h>
#include <linux/highmem.h>
#include <linux/ktime.h>
#include <linux/inetdevice.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include <net/route.h>
#include <net/ip6_route.h>
#include <net/addrconf.h>
#include <net/udp_tunnel.h>
#include <net/netns/generic.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_cache.h>

/*
 * Kernel verbs consumers call in with hard interrupts disabled (the MAD layer
 * posts and ib_cm creates address handles under spin_lock_irqsave). There,
 * spin_lock_bh's local_bh_enable would run softirqs with interrupts off; a
 * plain spin_lock is enough, since no softirq runs on this CPU while
 * interrupts are disabled. Returns whether bottom halves were disabled.
 */
bool ferroce_spin_lock_bh(spinlock_t *lock)
{
	if (irqs_disabled()) {
		spin_lock(lock);
		return false;
	}
	spin_lock_bh(lock);
	return true;
}
bool ferroce_spin_trylock_bh(spinlock_t *lock, bool *bh)
{
	if (irqs_disabled()) {
		*bh = false;
		return spin_trylock(lock);
	}
	*bh = true;
	return spin_trylock_bh(lock);
}
void ferroce_spin_unlock_bh(spinlock_t *lock, bool bh)
{
	if (bh)
		spin_unlock_bh(lock);
	else
		spin_unlock(lock);
}
bool ferroce_irqs_disabled(void) { return irqs_disabled(); }


struct ib_umem *ferroce_umem_get(struct ib_device *dev, u64 start, u64 length, int access)
{
	return ib_umem_get_va(dev, start, length, access);
}

size_t ferroce_umem_pages(struct ib_umem *umem, struct page **pages, size_t max)
{
	struct sg_page_iter it;
	size_t n = 0;

	for_each_sgtable_page(&umem->sgt_append.sgt, &it, 0) {
		if (n == max)
			break;
		pages[n++] = sg_page_iter_page(&it);
	}
	return n;
}


void ferroce_copy_from_page(void *dst, struct page *page, unsigned int off, unsigned int len)
{
	void *va = kmap_local_page(page);

	memcpy(dst, va + off, len);
	kunmap_local(va);
}

void ferroce_copy_to_page(struct page *page, unsigned int off, const void *src, unsigned int len)
{
	void *va = kmap_local_page(page);

	memcpy(va + off, src, len);
	kunmap_local(va);
}

struct sk_buff *ferroce_tx_alloc(struct net_device *ndev, unsigned int len)
{
	unsigned int head = LL_RESERVED_SPACE(ndev);
	struct sk_buff *skb = alloc_skb(head + len + ndev->needed_tailroom, GFP_ATOMIC);

	if (!skb)
		return NULL;
	skb_reserve(skb, head);
	skb_put(skb, len);
	skb->dev = ndev;
	return skb;
}

u8 *ferroce_skb_data(struct sk_buff *skb) { return skb->data; }
unsigned int ferroce_skb_len(const struct sk_buff *skb) { return skb->len; }

/*
 * The route cache. A lookup per packet (fib_table_lookup and its RCU walk) is
 * one of the wire path's largest costs after the ICRC, so each CPU keeps the
 * route it last used for ROUTE_SLOTS destinations (a slot per hash of the
 * destination), with a reference. A cached route is used only while it is
 * still the one a lookup would give: dst_check (the IPv4 generation, the
 * IPv6 cookie: a route or address change makes it fail), its netdev up, its
 * namespace the one asked for. Everything runs with bottom halves off, so
 * a slot is only ever touched by its own CPU, in one piece. A route cached
 * for a netdev that goes away does not hold the netdev: the IP stack moves
 * such routes to the blackhole device (dst_dev_put) and dst_check fails.
 */
#define FERROCE_ROUTE_SLOTS 16

struct ferroce_route {
	struct dst_entry *dst;
	u32 cookie;
	const struct net *net;
	int oif;
	bool v6;
	u8 tos;
	__be32 flowlabel;
	struct in6_addr saddr, daddr;
};

/* One CPU's routes. */
struct ferroce_route_set {
	struct ferroce_route slot[FERROCE_ROUTE_SLOTS];
};

struct ferroce_routes {
	struct ferroce_route_set __percpu *cpu;
};

struct ferroce_routes *ferroce_routes_alloc(void)
{
	struct ferroce_routes *routes = kzalloc(sizeof(*routes), GFP_KERNEL);

	if (!routes)
		return NULL;
	routes->cpu = alloc_percpu(struct ferroce_route_set);
	if (!routes->cpu) {
		kfree(routes);
		return NULL;
	}
	return routes;
}

void ferroce_routes_free(struct ferroce_routes *routes)
{
	int cpu, i;

	if (!routes)
		return;
	for_each_possible_cpu(cpu) {
		struct ferroce_route_set *set = per_cpu_ptr(routes->cpu, cpu);

		for (i = 0; i < FERROCE_ROUTE_SLOTS; i++)
			dst_release(set->slot[i].dst);
	}
	free_percpu(routes->cpu);
	kfree(routes);
}

/* This CPU's slot for a destination; bottom halves off. */
static struct ferroce_route *route_slot(struct ferroce_routes *routes, const struct in6_addr *daddr)
{
	return &this_cpu_ptr(routes->cpu)->slot[hash_32(ipv6_addr_hash(daddr), ilog2(FERROCE_ROUTE_SLOTS))];
}

static bool route_is(const struct ferroce_route *r, const struct ferroce_route *key)
{
	return r->dst && r->v6 == key->v6 && r->net == key->net && r->oif == key->oif && r->tos == key->tos &&
	       r->flowlabel == key->flowlabel && ipv6_addr_equal(&r->daddr, &key->daddr) &&
	       ipv6_addr_equal(&r->saddr, &key->saddr);
}

/* The slot's route for key, with a reference for the caller, or NULL (and
 * the slot emptied when what it held is no longer valid). */
static struct dst_entry *route_get(struct ferroce_route *r, const struct ferroce_route *key)
{
	struct dst_entry *dst;

	if (!route_is(r, key))
		return NULL;
	dst = dst_check(r->dst, r->cookie);
	if (dst) {
		struct net_device *dev;
		bool ok;

		rcu_read_lock();
		dev = dst_dev_rcu(dst);
		ok = (dev->flags & IFF_UP) && net_eq(dev_net(dev), key->net);
		rcu_read_unlock();
		if (ok) {
			dst_hold(dst);
			return dst;
		}
	}
	dst_release(r->dst);
	r->dst = NULL;
	return NULL;
}

/* Keeps dst (the caller's reference stays the caller's) in the slot. */
static void route_set(struct ferroce_route *r, const struct ferroce_route *key, struct dst_entry *dst, u32 cookie)
{
	dst_release(r->dst);
	*r = *key;
	dst_hold(dst);
	r->dst = dst;
	r->cookie = cookie;
}

static struct dst_entry *route4(struct ferroce_routes *routes, struct net *net, int oif, __be32 saddr,
				__be32 daddr, u8 tos)
{
	struct flowi4 fl = {
		.flowi4_oif = oif,
		.flowi4_dscp = inet_dsfield_to_dscp(tos),
		.flowi4_proto = IPPROTO_UDP,
		.saddr = saddr,
		.daddr = daddr,
	};
	struct ferroce_route key = { .net = net, .oif = oif, .tos = tos };
	struct ferroce_route *r = NULL;
	struct dst_entry *dst = NULL;
	struct rtable *rt;

	ipv6_addr_set_v4mapped(saddr, &key.saddr);
	ipv6_addr_set_v4mapped(daddr, &key.daddr);
	local_bh_disable();
	if (routes) {
		r = route_slot(routes, &key.daddr);
		dst = route_get(r, &key);
	}
	if (!dst) {
		rt = ip_route_output_key(net, &fl);
		if (IS_ERR(rt)) {
			dst = ERR_CAST(rt);
		} else {
			dst = &rt->dst;
			if (r)
				route_set(r, &key, dst, 0);
		}
	}
	local_bh_enable();
	return dst;
}

static struct dst_entry *route6(struct ferroce_routes *routes, struct net *net, int oif,
				const struct in6_addr *saddr, const struct in6_addr *daddr, __be32 flowlabel)
{
	struct flowi6 fl = {
		.flowi6_oif = oif,
		.flowi6_proto = IPPROTO_UDP,
		.saddr = *saddr,
		.daddr = *daddr,
		.flowlabel = flowlabel,
	};
	struct ferroce_route key = {
		.net = net, .oif = oif, .v6 = true, .flowlabel = flowlabel, .saddr = *saddr, .daddr = *daddr,
	};
	struct ferroce_route *r = NULL;
	struct dst_entry *dst = NULL;

	local_bh_disable();
	if (routes) {
		r = route_slot(routes, daddr);
		dst = route_get(r, &key);
	}
	if (!dst) {
		dst = ip6_dst_lookup_flow(net, NULL, &fl, NULL);
		if (!IS_ERR(dst) && r)
			route_set(r, &key, dst, rt6_get_cookie(dst_rt6_info(dst)));
	}
	local_bh_enable();
	return dst;
}

int ferroce_tx_send4(struct sk_buff *skb, struct ferroce_routes *routes, struct net *net, int oif,
		     __be32 saddr, __be32 daddr, u8 tos)
{
	struct dst_entry *dst = route4(routes, net, oif, saddr, daddr, tos);

	if (IS_ERR(dst)) {
		kfree_skb(skb);
		return -EHOSTUNREACH;
	}
	skb_dst_set(skb, dst);
	skb->protocol = htons(ETH_P_IP);
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, sizeof(struct iphdr));
	memset(IPCB(skb), 0, sizeof(*IPCB(skb)));
	return ip_local_out(net, NULL, skb);
}

int ferroce_tx_send6(struct sk_buff *skb, struct ferroce_routes *routes, struct net *net, int oif,
		     const struct in6_addr *saddr, const struct in6_addr *daddr, __be32 flowlabel)
{
	struct dst_entry *dst = route6(routes, net, oif, saddr, daddr, flowlabel);

	if (IS_ERR(dst)) {
		kfree_skb(skb);
		return -EHOSTUNREACH;
	}
	skb_dst_set(skb, dst);
	skb->protocol = htons(ETH_P_IPV6);
	skb_reset_network_header(skb);
	skb_set_transport_header(skb, sizeof(struct ipv6hdr));
	memset(IP6CB(skb), 0, sizeof(*IP6CB(skb)));
	return ip6_local_out(net, NULL, skb);
}

void ferroce_kfree_skb(struct sk_buff *skb) { kfree_skb(skb); }
void ferroce_consume_skb(struct sk_buff *skb) { consume_skb(skb); }

int ferroce_rx_linear(struct sk_buff *skb, u8 **ip, unsigned int *len)
{
	if (skb_linearize(skb))
		return -ENOMEM;
	*ip = skb_network_header(skb);
	*len = skb_tail_pointer(skb) - *ip;
	return 0;
}

struct net_device *ferroce_rx_netdev(struct sk_buff *skb)
{
	struct net *net = dev_net(skb->dev);
	struct net_device *ndev = NULL;

	/* A multicast datagram belongs to the device of the netdev it came in
	 * on (which joined the group: ferroce_mc_join). */
	if ((skb->protocol == htons(ETH_P_IP) && ipv4_is_multicast(ip_hdr(skb)->daddr)) ||
	    (skb->protocol == htons(ETH_P_IPV6) && ipv6_addr_is_multicast(&ipv6_hdr(skb)->daddr))) {
		ndev = skb->dev;
		dev_hold(ndev);
	} else if (skb->protocol == htons(ETH_P_IP)) {
		ndev = ip_dev_find(net, ip_hdr(skb)->daddr);
	} else if (skb->protocol == htons(ETH_P_IPV6)) {
		rcu_read_lock();
		ndev = ipv6_dev_find(net, &ipv6_hdr(skb)->daddr, NULL);
		if (ndev)
			dev_hold(ndev);
		rcu_read_unlock();
	}
	return ndev;
}

struct net *ferroce_dev_net(const struct net_device *ndev) { return dev_net(ndev); }

int ferroce_mc_join(struct net_device *ndev, const u8 *gid, bool join)
{
	const struct in6_addr *addr = (const struct in6_addr *)gid;
	struct in_device *in_dev;
	int err = 0;

	rtnl_lock();
	if (ipv6_addr_v4mapped(addr)) {
		in_dev = __in_dev_get_rtnl(ndev);
		if (!in_dev)
			err = -ENODEV;
		else if (join)
			ip_mc_inc_group(in_dev, addr->s6_addr32[3]);
		else
			ip_mc_dec_group(in_dev, addr->s6_addr32[3]);
	} else if (IS_ENABLED(CONFIG_IPV6)) {
		err = join ? ipv6_dev_mc_inc(ndev, addr) : ipv6_dev_mc_dec(ndev, addr);
	} else {
		err = -EAFNOSUPPORT;
	}
	rtnl_unlock();
	return err;
}

struct socket *ferroce_udp_tunnel_open(struct net *net, bool ipv6, ferroce_encap_rcv_t rcv)
{
	struct udp_port_cfg cfg = {};
	struct udp_tunnel_sock_cfg tnl = {};
	struct socket *sock;
	int err;

	cfg.family = ipv6 ? AF_INET6 : AF_INET;
	cfg.ipv6_v6only = ipv6;
	cfg.local_udp_port = htons(4791);
	err = udp_sock_create(net, &cfg, &sock);
	if (err < 0)
		return ERR_PTR(err);
	tnl.encap_type = 1;
	tnl.encap_rcv = rcv;
	setup_udp_tunnel_sock(net, sock->sk, &tnl);
	return sock;
}

void ferroce_udp_tunnel_close(struct socket *sock) { udp_tunnel_sock_release(sock->sk); }
void *ferroce_net_generic(const struct net *net, unsigned int id) { return net_generic(net, id); }

static DEFINE_MUTEX(ferroce_net_mutex);
void ferroce_net_lock(void) { mutex_lock(&ferroce_net_mutex); }
void ferroce_net_unlock(void) { mutex_unlock(&ferroce_net_mutex); }

int ferroce_gid_attr_ifindex(const struct ib_gid_attr *attr)
{
	struct net_device *ndev;
	int ifindex = 0;

	rcu_read_lock();
	ndev = rdma_read_gid_attr_ndev_rcu(attr);
	if (!IS_ERR(ndev))
		ifindex = ndev->ifindex;
	rcu_read_unlock();
	return ifindex;
}

struct net *ferroce_gid_attr_net(const struct ib_gid_attr *attr)
{
	struct net_device *ndev;
	struct net *net = &init_net;

	rcu_read_lock();
	ndev = rdma_read_gid_attr_ndev_rcu(attr);
	if (!IS_ERR(ndev))
		net = dev_net(ndev);
	rcu_read_unlock();
	return net;
}

u64 ferroce_page_cmpxchg(struct page *page, unsigned int off, u64 compare, u64 swap)
{
	u64 *va = kmap_local_page(page) + off;
	u64 old = cmpxchg64(va, compare, swap);

	kunmap_local(va);
	return old;
}

u64 ferroce_page_fetch_add(struct page *page, unsigned int off, u64 add)
{
	u64 *va = kmap_local_page(page) + off;
	u64 old = atomic64_fetch_add(add, (atomic64_t *)va);

	kunmap_local(va);
	return old;
}

u64 ferroce_va_cmpxchg(u64 *va, u64 compare, u64 swap) { return cmpxchg64(va, compare, swap); }
u64 ferroce_va_fetch_add(u64 *va, u64 add) { return atomic64_fetch_add(add, (atomic64_t *)va); }

/* ATOMIC WRITE: one aligned 8-byte store, never torn. */
void ferroce_page_write64(struct page *page, unsigned int off, u64 value)
{
	u64 *va = kmap_local_page(page) + off;

	WRITE_ONCE(*va, value);
	kunmap_local(va);
}

void ferroce_va_write64(u64 *va, u64 value) { WRITE_ONCE(*va, value); }

void ferroce_synchronize_net(void) { synchronize_net(); }
void ferroce_skb_pull(struct sk_buff *skb, unsigned int len) { skb_pull(skb, len); }
void ferroce_skb_trim(struct sk_buff *skb, unsigned int len) { skb_trim(skb, len); }
void ferroce_ib_umem_release(struct ib_umem *umem) { ib_umem_release(umem); }

void ferroce_call_comp_handler(struct ib_cq *cq)
{
	if (cq->comp_handler)
		cq->comp_handler(cq, cq->cq_context);
}

void ferroce_timer_setup(struct timer_list *t, ferroce_timer_fn fn) { timer_setup(t, fn, 0); }

void ferroce_timer_arm_ns(struct timer_list *t, u64 deadline_ns)
{
	u64 now = ktime_get_ns();
	unsigned long delta = deadline_ns > now ? nsecs_to_jiffies(deadline_ns - now) : 0;

	/* round up: never fire before the deadline */
	mod_timer(t, jiffies + delta + 1);
}

void ferroce_timer_cancel(struct timer_list *t) { timer_delete(t); }
void ferroce_timer_shutdown_sync(struct timer_list *t) { timer_shutdown_sync(t); }

static struct workqueue_struct *ferroce_wq;
static struct workqueue_struct *ferroce_qp_wq;
static struct workqueue_struct *ferroce_qp_hi_wq;
static struct workqueue_struct *ferroce_linger_wq;
static struct workqueue_struct *ferroce_comp_wq;

/*
 * A QP's send continuation (the work item that goes on sending what one
 * kick left) has two work items, one on a high-priority workqueue and one
 * on a normal one; the driver picks (sched.rs, `continue_tx`). At normal
 * priority it takes turns with the processes on its CPU: with ib_send_bw,
 * whose server spins on its CQ as the client does, both CPUs of a two-CPU
 * guest had a spinner and the sender got half a CPU (64 KiB across a veth:
 * 25.0 and 29.6 MiB/s, against 46.5 and 52.8 at high priority). But at
 * nice -20 a continuation that always has more to send would hold its CPU
 * against every other process there for as long as it has work (in the
 * runs measured, a process pinned beside perftest streams still got its
 * share at every setting: design, "Transmit"; the bound is what makes
 * that so by construction). So, as softirqs get 2 ms before the rest goes
 * to ksoftirqd, a QP's
 * continuation runs at high priority for qp_hi_us, then at normal
 * priority for qp_lo_us (or until it has been idle that long), then at
 * high again. qp_hi_us=0: always normal; qp_lo_us=0: always high. Both
 * may change at run time: each work item stays on its own queue.
 */
static unsigned int qp_hi_us = 2000;
module_param(qp_hi_us, uint, 0644);
MODULE_PARM_DESC(qp_hi_us, "microseconds a QP's send continuation runs at high priority before it rests at normal priority (0: never high)");
static unsigned int qp_lo_us = 2000;
module_param(qp_lo_us, uint, 0644);
MODULE_PARM_DESC(qp_lo_us, "microseconds a QP's send continuation rests at normal priority after qp_hi_us at high (0: never rests; it then outranks every process on its CPU while it has work)");

u64 ferroce_qp_hi_ns(void) { return (u64)READ_ONCE(qp_hi_us) * NSEC_PER_USEC; }
u64 ferroce_qp_lo_ns(void) { return (u64)READ_ONCE(qp_lo_us) * NSEC_PER_USEC; }

int ferroce_wq_create(void)
{
	ferroce_wq = alloc_workqueue("ferroce", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!ferroce_wq)
		return -ENOMEM;
	/*
	 * QP work items (a send side's continuation) and the linger work run
	 * bound to a CPU that ferroce picks (qp_queue): not the one where the
	 * process posting to the QP keeps running. CPU_INTENSIVE: a long
	 * continuation or a linger's spin must not hold up the CPU's other
	 * per-CPU work items. A continuation's high-priority item goes on
	 * ferroce_qp_hi (above); the linger work is always normal (it spins
	 * waiting for a process).
	 */
	ferroce_qp_wq = alloc_workqueue("ferroce_qp", WQ_PERCPU | WQ_MEM_RECLAIM | WQ_CPU_INTENSIVE, 0);
	if (!ferroce_qp_wq) {
		destroy_workqueue(ferroce_wq);
		return -ENOMEM;
	}
	ferroce_qp_hi_wq = alloc_workqueue("ferroce_qp_hi", WQ_PERCPU | WQ_MEM_RECLAIM | WQ_CPU_INTENSIVE | WQ_HIGHPRI, 0);
	if (!ferroce_qp_hi_wq) {
		destroy_workqueue(ferroce_qp_wq);
		destroy_workqueue(ferroce_wq);
		return -ENOMEM;
	}
	ferroce_linger_wq = alloc_workqueue("ferroce_linger", WQ_PERCPU | WQ_MEM_RECLAIM | WQ_CPU_INTENSIVE, 0);
	if (!ferroce_linger_wq) {
		destroy_workqueue(ferroce_qp_hi_wq);
		destroy_workqueue(ferroce_qp_wq);
		destroy_workqueue(ferroce_wq);
		return -ENOMEM;
	}
	/*
	 * Completion handlers of CQs whose vector names another CPU than the
	 * one a completion came on (ferroce_comp_work_queue_on): per CPU and
	 * high priority, the nearest a software device has to an interrupt
	 * bound to a CPU.
	 */
	ferroce_comp_wq = alloc_workqueue("ferroce_comp", WQ_PERCPU | WQ_HIGHPRI | WQ_MEM_RECLAIM, 0);
	if (!ferroce_comp_wq) {
		destroy_workqueue(ferroce_linger_wq);
		destroy_workqueue(ferroce_qp_hi_wq);
		destroy_workqueue(ferroce_qp_wq);
		destroy_workqueue(ferroce_wq);
		return -ENOMEM;
	}
	return 0;
}

void ferroce_wq_destroy(void)
{
	destroy_workqueue(ferroce_comp_wq);
	destroy_workqueue(ferroce_linger_wq);
	destroy_workqueue(ferroce_qp_hi_wq);
	destroy_workqueue(ferroce_qp_wq);
	destroy_workqueue(ferroce_wq);
}

void ferroce_work_init(struct work_struct *w, ferroce_work_fn fn) { INIT_WORK(w, fn); }
void ferroce_work_queue(struct work_struct *w) { queue_work(ferroce_wq, w); }

/*
 * A QP's work item goes to the next online CPU after this one when a
 * process (its doorbell) queues it, leaving this CPU to the process; the
 * unbound queue's workers were often woken on the process's own CPU,
 * where the two took turns: half the message rate. A work item that
 * queues it (a linger that lingers again) keeps it on its own CPU, which
 * is already not the process's. So does a softirq: the packets it sent
 * wait in this CPU's receive backlog (a veth, the loopback) until the
 * softirq ends, and the work item that continues its burst runs after
 * that, behind them. On the next CPU, the continuation's packets went
 * out first: on a veth, 6.6% of ferroce's packets arrived behind later
 * ones, 3.6% after this change (captured at both ends, rc_integrity
 * against rdma_rxe).
 */
static void qp_queue(struct workqueue_struct *wq, struct work_struct *w)
{
	int cpu = get_cpu();
	int target = cpu;

	if (in_task() && !(current->flags & PF_WQ_WORKER)) {
		target = cpumask_next(cpu, cpu_online_mask);
		if (target >= nr_cpu_ids)
			target = cpumask_first(cpu_online_mask);
		if (target >= nr_cpu_ids)
			target = cpu;
	}
	put_cpu();
	queue_work_on(target, wq, w);
}
void ferroce_qp_work_queue(struct work_struct *w) { qp_queue(ferroce_qp_wq, w); }
void ferroce_qp_hi_work_queue(struct work_struct *w) { qp_queue(ferroce_qp_hi_wq, w); }
void ferroce_linger_work_queue(struct work_struct *w) { qp_queue(ferroce_linger_wq, w); }
void ferroce_work_cancel_sync(struct work_struct *w) { cancel_work_sync(w); }

/*
 * Bulk sends and the receive hand-off. A veth (or any netdev that delivers
 * on the sending CPU: the loopback, a bridge between namespaces) receives a
 * packet in the softirq that runs when its sender's transmit re-enables
 * bottom halves: a ferroce device that sends a batch to another ferroce
 * device on this host does the receiver's work too, packet by packet, on
 * the same CPU, and the other CPUs stay idle (48% of a two-CPU guest in
 * ib_write_bw -s 65536 across a veth). While a device sends a batch with
 * much to receive it marks its CPU (ferroce_bulk_begin/_end, with
 * preemption off so that the mark stays with the CPU), and a datagram that
 * arrives while the mark is up is handed to the receiving device's work
 * item on the next online CPU (ferroce_rx_defer_cpu), as RPS would. The
 * work item is a bottom-half one (system_bh_wq: it runs in that CPU's
 * softirq, raised by an IPI), so that, as with RPS, a process that spins
 * on the CPU does not hold it back until the scheduler's next tick: a
 * process-context work item halved the 64 KiB send bandwidth, whose server
 * spins on its completion queue.
 */
static DEFINE_PER_CPU(unsigned int, ferroce_bulk);

/* The hand-off can be turned off at run time (as RPS can), to compare. */
static bool rx_handoff = true;
module_param(rx_handoff, bool, 0644);
MODULE_PARM_DESC(rx_handoff, "receive a datagram that arrives inside a bulk send of its CPU on the next CPU (default on)");

void ferroce_bulk_begin(void)
{
	preempt_disable();
	__this_cpu_inc(ferroce_bulk);
}

void ferroce_bulk_end(void)
{
	__this_cpu_dec(ferroce_bulk);
	preempt_enable();
}

/* The CPU to hand a datagram received here to, or -1 to receive it here:
 * the next online CPU when this one is inside a bulk send. */
int ferroce_rx_defer_cpu(void)
{
	int cpu, next;

	if (!READ_ONCE(rx_handoff) || !this_cpu_read(ferroce_bulk))
		return -1;
	cpu = get_cpu();
	next = cpumask_next(cpu, cpu_online_mask);
	if (next >= nr_cpu_ids)
		next = cpumask_first(cpu_online_mask);
	put_cpu();
	return next < nr_cpu_ids && next != cpu ? next : -1;
}

/* A device's bottom-half work item (the receive hand-off's, the burst
 * work) runs in the softirq of `cpu` if it is online, else (cpu -1: the
 * burst work) of this CPU. */
void ferroce_rx_work_queue_on(struct work_struct *w, int cpu)
{
	if (cpu >= 0 && cpu < nr_cpu_ids && cpu_online(cpu))
		queue_work_on(cpu, system_bh_wq, w);
	else
		queue_work(system_bh_wq, w);
}

/*
 * Receive bursts. A veth (or the loopback) hands the datagrams of a batch
 * one by one to the softirq that runs when bottom halves come back on; a
 * receiving RC QP whose engine has something to send (an ACK, a READ
 * response, room in its window) would send it after every datagram: one
 * ACK per 64-byte write, as rdma_rxe sends. With rx_burst, a ferroce batch
 * is sent with bottom halves off (the softirq then receives it whole) and
 * the send side of a QP that received is run once, by the device's burst
 * work item, after the softirq's receive pass: one ACK (which covers every
 * earlier PSN) for the burst. It can be turned off to compare.
 */
static bool rx_burst = true;
module_param(rx_burst, bool, 0644);
MODULE_PARM_DESC(rx_burst, "send a batch with bottom halves off and answer what a receive burst asks for once, after it (default on)");

/* Whether this CPU is in a burst: it sent a batch (or a hand-off work item
 * receives one) since its last burst work ran. A datagram received outside
 * one (a latency test's single packet) is answered in place: deferred, it
 * took 20 us more (ib_write_lat, typical 111 against 90 us under TCG). */
static DEFINE_PER_CPU(bool, ferroce_burst);

/* Marks this CPU; false, and nothing marked, with rx_burst off. */
bool ferroce_burst_mark(void)
{
	if (!READ_ONCE(rx_burst))
		return false;
	this_cpu_write(ferroce_burst, true);
	return true;
}

bool ferroce_in_burst(void) { return READ_ONCE(rx_burst) && this_cpu_read(ferroce_burst); }
void ferroce_burst_clear(void) { this_cpu_write(ferroce_burst, false); }

void ferroce_bh_disable(void) { local_bh_disable(); }
void ferroce_bh_enable(void) { local_bh_enable(); }

u32 ferroce_num_comp_vectors(void) { return num_possible_cpus(); }

/* Completion vector i's CPU: the i-th online CPU, wrapping, as drivers spread their interrupts. */
int ferroce_vector_cpu(u32 vector) { return cpumask_local_spread(vector, NUMA_NO_NODE); }

/*
 * Whether a completion handler bound to `cpu` may run right here: on that
 * CPU, or the CPU went offline (its handler runs where the completion is).
 */
bool ferroce_comp_here(int cpu) { return raw_smp_processor_id() == cpu || !cpu_online(cpu); }

bool ferroce_comp_work_queue_on(struct work_struct *w, int cpu) { return queue_work_on(cpu, ferroce_comp_wq, w); }
void ferroce_cond_resched(void) { cond_resched(); }
unsigned long ferroce_totalram_pages(void) { return totalram_pages(); }

int ferroce_copy_from_user(void *dst, u64 user_addr, size_t len)
{
	return copy_from_user(dst, u64_to_user_ptr(user_addr), len) ? -EFAULT : 0;
}

bool ferroce_qp_is_user(const struct ib_qp *qp) { return qp->uobject != NULL; }

void ferroce_srq_limit_event(struct ib_srq *srq)
{
	struct ib_event ev = {
		.device = srq->device,
		.element.srq = srq,
		.event = IB_EVENT_SRQ_LIMIT_REACHED,
	};

	if (srq->event_handler)
		srq->event_handler(&ev, srq->srq_context);
}

void ferroce_cq_err_event(struct ib_cq *cq)
{
	struct ib_event ev = {
		.device = cq->device,
		.element.cq = cq,
		.event = IB_EVENT_CQ_ERR,
	};

	if (cq->event_handler)
		cq->event_handler(&ev, cq->cq_context);
}

void ferroce_qp_event(struct ib_qp *qp, enum ib_event_type type)
{
	struct ib_event ev = {
		.device = qp->device,
		.element.qp = qp,
		.event = type,
	};

	if (qp->event_handler)
		qp->event_handler(&ev, qp->qp_context);
}

void ferroce_skbq_init(struct sk_buff_head *q) { skb_queue_head_init(q); }
void ferroce_skbq_tail(struct sk_buff_head *q, struct sk_buff *skb) { skb_queue_tail(q, skb); }
struct sk_buff *ferroce_skbq_dequeue(struct sk_buff_head *q) { return skb_dequeue(q); }
bool ferroce_skbq_empty(const struct sk_buff_head *q) { return skb_queue_empty_lockless(q); }
void ferroce_skbq_purge(struct sk_buff_head *q) { skb_queue_purge(q); }

/*
 * Rings shared with a process (ferroce-abi.h): zeroed vmalloc memory reached
 * by the process through an rdma_user_mmap_entry of its ucontext. The
 * memory belongs to the entry and is freed in ferroce_mmap_free, when the
 * last reference (the driver's, or an mmap call in progress) is gone; the
 * pages themselves stay alive while a process still maps them (the mapping
 * holds page references).
 */
#include <linux/vmalloc.h>
#include <rdma/uverbs_ioctl.h>

struct ferroce_mmap_entry {
	struct rdma_user_mmap_entry rdma;
	void *addr;
};

struct ib_ucontext *ferroce_udata_ucontext(struct ib_udata *udata)
{
	if (!udata)
		return NULL;
	return rdma_udata_to_uverbs_attr_bundle(udata)->context;
}

void *ferroce_ring_create(struct ib_ucontext *uctx, size_t len, u64 *offset,
			  struct rdma_user_mmap_entry **out)
{
	struct ferroce_mmap_entry *e;

	if (!uctx || !len)
		return NULL;
	/*
	 * Charged to the process's memory cgroup (as its other objects are):
	 * vmalloc_user() cannot be, so the zeroed pages come from __vmalloc()
	 * and ferroce_mmap() inserts them one by one (what
	 * remap_vmalloc_range() does for VM_USERMAP areas).
	 */
	e = kzalloc(sizeof(*e), GFP_KERNEL_ACCOUNT);
	if (!e)
		return NULL;
	e->addr = __vmalloc(PAGE_ALIGN(len), GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!e->addr) {
		kfree(e);
		return NULL;
	}
	if (rdma_user_mmap_entry_insert(uctx, &e->rdma, PAGE_ALIGN(len))) {
		vfree(e->addr);
		kfree(e);
		return NULL;
	}
	*offset = rdma_user_mmap_get_offset(&e->rdma);
	*out = &e->rdma;
	return e->addr;
}

void ferroce_ring_destroy(struct rdma_user_mmap_entry *entry)
{
	rdma_user_mmap_entry_remove(entry);
}

/*
 * Maps the pages of a ring (npages, from __vmalloc, zeroed) into vma from
 * its start: the whole mapping must lie inside the ring.
 */
static int ferroce_map_pages(struct vm_area_struct *vma, void *addr, size_t npages)
{
	unsigned long len = vma->vm_end - vma->vm_start, off;
	int ret;

	if (len > npages * PAGE_SIZE)
		return -EINVAL;
	for (off = 0; off < len; off += PAGE_SIZE) {
		ret = vm_insert_page(vma, vma->vm_start + off, vmalloc_to_page(addr + off));
		if (ret)
			return ret;
	}
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return 0;
}

int ferroce_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *r;
	struct ferroce_mmap_entry *e;
	int ret;

	r = rdma_user_mmap_entry_get(uctx, vma);
	if (!r)
		return -EINVAL;
	e = container_of(r, struct ferroce_mmap_entry, rdma);
	ret = ferroce_map_pages(vma, e->addr, r->npages);
	rdma_user_mmap_entry_put(r);
	return ret;
}

void ferroce_mmap_free(struct rdma_user_mmap_entry *r)
{
	struct ferroce_mmap_entry *e = container_of(r, struct ferroce_mmap_entry, rdma);

	vfree(e->addr);
	kfree(e);
}

/* One copy of a slot the process may be rewriting: the copy is ours. */
void ferroce_ring_read(void *dst, const void *src, size_t len) { memcpy(dst, src, len); }
struct ib_udata *ferroce_attrs_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}
#include <linux/delay.h>
#include <linux/crc32.h>
u32 ferroce_crc32_le(u32 crc, const u8 *p, size_t len) { return crc32_le(crc, p, len); }
/* usleep_range: kernel::time::delay::fsleep busy-waits (udelay) up to 10 us. */
void ferroce_usleep(unsigned long min_us, unsigned long max_us) { usleep_range(min_us, max_us); }

u32 ferroce_skbq_len(const struct sk_buff_head *q) { return skb_queue_len(q); }

/* --- identities --- */
#include <linux/random.h>
#include <linux/moduleparam.h>

u32 ferroce_random_u32(void) { return get_random_u32(); }

/*
 * Test only: where the cyclic PD handle allocator starts looking (taken
 * modulo the table size). tests/guest/security.sh starts it just below
 * 2^32 to show that no amount of alloc_pd/dealloc_pd brings back the
 * handle of a live PD (the kernel's, whose DMA region names all memory).
 */
static unsigned int test_pd_start;
module_param(test_pd_start, uint, 0444);
MODULE_PARM_DESC(test_pd_start, "test only: start position of the PD handle allocator");

u32 ferroce_test_pd_start(void) { return test_pd_start; }

/*
 * Objects of each kind (PD, AH, CQ, QP, SRQ, MR, multicast attachment) one
 * user may hold on one device; 0 (the default): half of the largest table
 * (64k QPs, 1M MRs), which a smaller value lowers (it never raises it).
 */
static unsigned int user_quota;
module_param(user_quota, uint, 0444);
MODULE_PARM_DESC(user_quota, "objects of each kind one user may hold on a device (0: half of the largest table)");

u32 ferroce_user_quota(void) { return user_quota; }

/* Test only: a smaller bound of the device's local queue (0: the default). */
static unsigned int test_local_queue_max;
module_param(test_local_queue_max, uint, 0444);
MODULE_PARM_DESC(test_local_queue_max, "test only: packets the local queue holds (0: 4096)");

u32 ferroce_test_local_queue_max(void) { return test_local_queue_max; }

/*
 * On-demand paging. A region of IB_ACCESS_ON_DEMAND pins nothing: the core's
 * ib_umem_odp follows the process's page tables through an MMU interval
 * notifier, and ferroce keeps its own table of the pages it may touch,
 * pages[], written only by a fault that the notifier sequence proves
 * current (under umem_mutex) and cleared by every invalidation before the
 * core lets the pages go. The datapath (softirq, or a sender under the
 * device's lock: it may not sleep) reads pages[] under `lock` and never
 * faults: it reports a page absent, and a fault runs later in process
 * context (ferroce_odp_fault), one at a time per region (`fault_lock`: the
 * core's pfn_list is written by hmm_range_fault without umem_mutex).
 */
#include <linux/hmm.h>
#include <linux/kref.h>
#include <rdma/ib_umem_odp.h>

#define FERROCE_ODP_WRITE 1UL

struct ferroce_odp {
	struct ib_umem_odp *umem;
	struct kref ref;
	struct mutex fault_lock;
	spinlock_t lock;
	/* Pages [bad_lo, bad_hi) could not be faulted in: an access to one of
	 * them that finds it absent is refused, not retried. */
	unsigned long bad_lo, bad_hi;
	unsigned long npages;
	unsigned long pages[]; /* struct page * | FERROCE_ODP_WRITE; 0: absent */
};

static bool ferroce_odp_invalidate(struct mmu_interval_notifier *mni,
				   const struct mmu_notifier_range *range,
				   unsigned long cur_seq)
{
	struct ib_umem_odp *umem = container_of(mni, struct ib_umem_odp, notifier);
	struct ferroce_odp *o = umem->private;
	unsigned long start, end, i;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&umem->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max_t(u64, ib_umem_start(umem), range->start);
	end = min_t(u64, ib_umem_end(umem), range->end);
	if (o && start < end) {
		spin_lock_bh(&o->lock);
		for (i = (start - ib_umem_start(umem)) >> PAGE_SHIFT;
		     i < o->npages && i < (end - ib_umem_start(umem) + PAGE_SIZE - 1) >> PAGE_SHIFT; i++)
			o->pages[i] = 0;
		spin_unlock_bh(&o->lock);
	}
	if (start < end)
		ib_umem_odp_unmap_dma_pages(umem, start, end);
	mutex_unlock(&umem->umem_mutex);
	return true;
}

static const struct mmu_interval_notifier_ops ferroce_odp_ops = {
	.invalidate = ferroce_odp_invalidate,
};

struct ferroce_odp *ferroce_odp_get(struct ib_device *dev, u64 start, u64 length, int access)
{
	struct ib_umem_odp *umem;
	struct ferroce_odp *o;
	unsigned long npages;

	if (!IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING))
		return ERR_PTR(-EOPNOTSUPP);
	/* One page size: the system's (no IB_ACCESS_HUGETLB). */
	umem = ib_umem_odp_get(dev, start, length, access & ~IB_ACCESS_HUGETLB, &ferroce_odp_ops);
	if (IS_ERR(umem))
		return ERR_CAST(umem);
	npages = (ib_umem_end(umem) - ib_umem_start(umem)) >> PAGE_SHIFT;
	/* As large as the core's pfn_list (one word a page), charged to the
	 * process's cgroup; no warning for a size a process chose, and
	 * ENOMEM rather than the OOM killer when memory is short (the
	 * caller's per-user budget bounds the size). */
	o = kvzalloc(struct_size(o, pages, npages), GFP_KERNEL_ACCOUNT | __GFP_NOWARN | __GFP_NORETRY);
	if (!o) {
		ib_umem_odp_release(umem);
		return ERR_PTR(-ENOMEM);
	}
	o->umem = umem;
	kref_init(&o->ref);
	mutex_init(&o->fault_lock);
	spin_lock_init(&o->lock);
	o->npages = npages;
	/* The notifier may run from here on; it finds the table empty. */
	mutex_lock(&umem->umem_mutex);
	umem->private = o;
	mutex_unlock(&umem->umem_mutex);
	return o;
}

void ferroce_odp_ref(struct ferroce_odp *o) { kref_get(&o->ref); }

static void ferroce_odp_free(struct kref *ref)
{
	struct ferroce_odp *o = container_of(ref, struct ferroce_odp, ref);

	/* Removes the notifier (waiting for a running invalidation) first. */
	ib_umem_odp_release(o->umem);
	mutex_destroy(&o->fault_lock);
	kvfree(o);
}

void ferroce_odp_put(struct ferroce_odp *o)
{
	might_sleep();
	kref_put(&o->ref, ferroce_odp_free);
}

/* Byte offset of the region's first byte in its first page. */
u64 ferroce_odp_offset(const struct ferroce_odp *o)
{
	return o->umem->umem.address - ib_umem_start(o->umem);
}

int ferroce_odp_fault(struct ferroce_odp *o, u64 pos, u64 len, bool write, bool fault)
{
	struct ib_umem_odp *umem = o->umem;
	unsigned long first, last, i;
	int np;

	might_sleep();
	if (!len || pos >= (u64)o->npages << PAGE_SHIFT || len > ((u64)o->npages << PAGE_SHIFT) - pos)
		return -EINVAL;
	if (write && !umem->umem.writable)
		return -EPERM;
	first = pos >> PAGE_SHIFT;
	last = (pos + len - 1) >> PAGE_SHIFT;
	mutex_lock(&o->fault_lock);
	np = ib_umem_odp_map_dma_and_lock(umem, ib_umem_start(umem) + pos, len,
					  write ? HMM_PFN_WRITE : 0, fault);
	if (np < 0) {
		mutex_unlock(&o->fault_lock);
		if (fault) {
			spin_lock_bh(&o->lock);
			o->bad_lo = first;
			o->bad_hi = last + 1;
			spin_unlock_bh(&o->lock);
		}
		return np;
	}
	/* umem_mutex held and the sequence checked: the pfns are current. */
	spin_lock_bh(&o->lock);
	for (i = first; i <= last; i++) {
		unsigned long pfn = umem->map.pfn_list[i];

		if ((pfn & HMM_PFN_VALID) && !(pfn & HMM_PFN_ERROR))
			o->pages[i] = (unsigned long)hmm_pfn_to_page(pfn) |
				      ((pfn & HMM_PFN_WRITE) ? FERROCE_ODP_WRITE : 0);
		else
			o->pages[i] = 0;
	}
	if (fault && o->bad_lo < o->bad_hi && first < o->bad_hi && last >= o->bad_lo)
		o->bad_lo = o->bad_hi = 0;
	spin_unlock_bh(&o->lock);
	mutex_unlock(&umem->umem_mutex);
	mutex_unlock(&o->fault_lock);
	return 0;
}

struct ferroce_odp_prefetch {
	struct work_struct work;
	struct ferroce_odp *o;
	u64 pos, len;
	bool write, fault;
};

static void ferroce_odp_prefetch_work(struct work_struct *w)
{
	struct ferroce_odp_prefetch *p = container_of(w, struct ferroce_odp_prefetch, work);

	/* Best effort (ibv_advise_mr without IBV_ADVISE_MR_FLAG_FLUSH). */
	ferroce_odp_fault(p->o, p->pos, p->len, p->write, p->fault);
	ferroce_odp_put(p->o);
	kfree(p);
}

int ferroce_odp_prefetch_async(struct ferroce_odp *o, u64 pos, u64 len, bool write, bool fault)
{
	struct ferroce_odp_prefetch *p = kzalloc(sizeof(*p), GFP_KERNEL_ACCOUNT);

	if (!p)
		return -ENOMEM;
	kref_get(&o->ref);
	p->o = o;
	p->pos = pos;
	p->len = len;
	p->write = write;
	p->fault = fault;
	INIT_WORK(&p->work, ferroce_odp_prefetch_work);
	queue_work(ferroce_wq, &p->work);
	return 0;
}

void ferroce_wq_flush(void) { flush_workqueue(ferroce_wq); }

/* Under o->lock: whether [pos, pos + len) is in the table (writable with
 * `write`): 0, -EAGAIN (absent: fault it in) or -EFAULT (absent, and its
 * last fault failed). */
static int ferroce_odp_check_locked(struct ferroce_odp *o, u64 pos, u64 len, bool write)
{
	unsigned long i, first, last;

	if (!len)
		return 0;
	if (pos >= (u64)o->npages << PAGE_SHIFT || len > ((u64)o->npages << PAGE_SHIFT) - pos)
		return -ERANGE;
	first = pos >> PAGE_SHIFT;
	last = (pos + len - 1) >> PAGE_SHIFT;
	for (i = first; i <= last; i++) {
		unsigned long p = o->pages[i];

		if (!p || (write && !(p & FERROCE_ODP_WRITE)))
			return (i >= o->bad_lo && i < o->bad_hi) ? -EFAULT : -EAGAIN;
	}
	return 0;
}

static struct page *ferroce_odp_page(struct ferroce_odp *o, u64 pos)
{
	return (struct page *)(o->pages[pos >> PAGE_SHIFT] & ~FERROCE_ODP_WRITE);
}

int ferroce_odp_present(struct ferroce_odp *o, u64 pos, u64 len, bool write)
{
	int r;

	spin_lock_bh(&o->lock);
	r = ferroce_odp_check_locked(o, pos, len, write);
	spin_unlock_bh(&o->lock);
	return r;
}

int ferroce_odp_copy(struct ferroce_odp *o, u64 pos, void *buf, u32 len, bool to_pages)
{
	u32 done = 0;
	int r;

	spin_lock_bh(&o->lock);
	r = ferroce_odp_check_locked(o, pos, len, to_pages);
	while (!r && done < len) {
		u64 at = pos + done;
		u32 in_page = at & (PAGE_SIZE - 1);
		u32 n = min_t(u32, PAGE_SIZE - in_page, len - done);
		void *va = kmap_local_page(ferroce_odp_page(o, at));

		if (to_pages)
			memcpy(va + in_page, buf + done, n);
		else
			memcpy(buf + done, va + in_page, n);
		kunmap_local(va);
		done += n;
	}
	spin_unlock_bh(&o->lock);
	return r;
}

/* An 8-byte aligned word at pos: op 0 compare and swap, 1 fetch and add,
 * 2 store (ATOMIC WRITE); *old is the value before. */
int ferroce_odp_atomic(struct ferroce_odp *o, u64 pos, int op, u64 a, u64 b, u64 *old)
{
	int r;

	if (pos & 7)
		return -EINVAL;
	spin_lock_bh(&o->lock);
	r = ferroce_odp_check_locked(o, pos, 8, true);
	if (!r) {
		u64 *va = kmap_local_page(ferroce_odp_page(o, pos)) + (pos & (PAGE_SIZE - 1));

		if (op == 0)
			*old = cmpxchg64(va, a, b);
		else if (op == 1)
			*old = atomic64_fetch_add(a, (atomic64_t *)va);
		else {
			*old = 0;
			smp_store_release(va, a);
		}
		kunmap_local(va);
	}
	spin_unlock_bh(&o->lock);
	return r;
}
