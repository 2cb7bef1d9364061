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

struct net *ferroce_init_net(void);

/* net_device accessors (struct net_device stays opaque to Rust) */
unsigned int ferroce_netdev_mtu(const struct net_device *ndev);
const char *ferroce_netdev_name(const struct net_device *ndev);
/* Copies up to len bytes of the hardware address; returns the address length. */
unsigned int ferroce_netdev_hwaddr(const struct net_device *ndev, u8 *buf, unsigned int len);
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
int ferroce_copy_from_udata(void *dst, struct ib_udata *udata, size_t len);
size_t ferroce_udata_outlen(const struct ib_udata *udata);
size_t ferroce_udata_inlen(const struct ib_udata *udata);

/* --- locks (spinlock_t stays opaque to Rust) --- */
bool ferroce_spin_lock_bh(spinlock_t *lock);
/* Returns whether the lock was taken; *bh as ferroce_spin_lock_bh returns. */
bool ferroce_spin_trylock_bh(spinlock_t *lock, bool *bh);
bool ferroce_irqs_disabled(void);
void ferroce_spin_unlock_bh(spinlock_t *lock, bool bh);

/* --- user memory (ib_umem) --- */
struct ib_umem *ferroce_umem_get(struct ib_device *dev, u64 start, u64 length, int access);
/* Fills up to max page pointers of the pinned region; returns how many. */
size_t ferroce_umem_pages(struct ib_umem *umem, struct page **pages, size_t max);
/* Copies between a kernel buffer and a page (kmap_local_page). */
void ferroce_copy_from_page(void *dst, struct page *page, unsigned int off, unsigned int len);
void ferroce_copy_to_page(struct page *page, unsigned int off, const void *src, unsigned int len);

/* --- packets --- */
/* A linear skb with room for the link layer header of ndev and len bytes of
 * IP packet (IP, UDP, transport, ICRC), skb->data at the IP header. */
struct sk_buff *ferroce_tx_alloc(struct net_device *ndev, unsigned int len);
u8 *ferroce_skb_data(struct sk_buff *skb);
unsigned int ferroce_skb_len(const struct sk_buff *skb);
/* A device's routes: per CPU, the route each of a few destinations took
 * last, held until it is no longer valid (dst_check, the netdev down), the
 * slot is taken by another destination, or the cache is freed. NULL when
 * memory is short. */
struct ferroce_routes;
struct ferroce_routes *ferroce_routes_alloc(void);
void ferroce_routes_free(struct ferroce_routes *routes);
/* Route (through routes, when it is not NULL) and send an IP packet the
 * caller has written; consumes the skb. */
int ferroce_tx_send4(struct sk_buff *skb, struct ferroce_routes *routes, struct net *net, int oif,
		     __be32 saddr, __be32 daddr, u8 tos);
int ferroce_tx_send6(struct sk_buff *skb, struct ferroce_routes *routes, struct net *net, int oif,
		     const struct in6_addr *saddr, const struct in6_addr *daddr, __be32 flowlabel);
void ferroce_kfree_skb(struct sk_buff *skb);
/* Bulk sends and the receive hand-off (see helpers.c). */
void ferroce_bulk_begin(void);
void ferroce_bulk_end(void);
int ferroce_rx_defer_cpu(void);
void ferroce_rx_work_queue_on(struct work_struct *w, int cpu);
bool ferroce_burst_mark(void);
bool ferroce_in_burst(void);
void ferroce_burst_clear(void);
void ferroce_bh_disable(void);
void ferroce_bh_enable(void);
void ferroce_consume_skb(struct sk_buff *skb);
/* Received packets: linearize and return the IP header and the bytes from
 * it to the end; the netdev that owns the destination address (with a
 * reference) or NULL. */
int ferroce_rx_linear(struct sk_buff *skb, u8 **ip, unsigned int *len);
struct net_device *ferroce_rx_netdev(struct sk_buff *skb);
struct net *ferroce_dev_net(const struct net_device *ndev);
/* Joins (join) or leaves the IP multicast group of a multicast GID (an
 * IPv4-mapped or IPv6 address) on ndev, so that its datagrams reach the
 * UDP sockets; counted by the IP stack. Process context (takes RTNL). */
int ferroce_mc_join(struct net_device *ndev, const u8 *gid, bool join);

/* --- UDP tunnel sockets, one pair per network namespace --- */
typedef int (*ferroce_encap_rcv_t)(struct sock *sk, struct sk_buff *skb);
struct socket *ferroce_udp_tunnel_open(struct net *net, bool ipv6, ferroce_encap_rcv_t rcv);
void ferroce_udp_tunnel_close(struct socket *sock);
void *ferroce_net_generic(const struct net *net, unsigned int id);
void ferroce_net_lock(void);
void ferroce_net_unlock(void);

/* --- address handles --- */
/* From a RoCE v2 GID attribute: the netdev ifindex and network type. */
int ferroce_gid_attr_ifindex(const struct ib_gid_attr *attr);
struct net *ferroce_gid_attr_net(const struct ib_gid_attr *attr);

/* --- atomics on registered memory (8-byte aligned, inside one page) --- */
u64 ferroce_page_cmpxchg(struct page *page, unsigned int off, u64 compare, u64 swap);
u64 ferroce_page_fetch_add(struct page *page, unsigned int off, u64 add);
u64 ferroce_va_cmpxchg(u64 *va, u64 compare, u64 swap);
u64 ferroce_va_fetch_add(u64 *va, u64 add);
void ferroce_page_write64(struct page *page, unsigned int off, u64 value);
void ferroce_va_write64(u64 *va, u64 value);

/* --- misc --- */
void ferroce_synchronize_net(void);
void ferroce_skb_pull(struct sk_buff *skb, unsigned int len);
void ferroce_skb_trim(struct sk_buff *skb, unsigned int len);
void ferroce_ib_umem_release(struct ib_umem *umem);
void ferroce_call_comp_handler(struct ib_cq *cq);

/* --- timers (struct timer_list stays opaque to Rust) --- */
typedef void (*ferroce_timer_fn)(struct timer_list *t);
void ferroce_timer_setup(struct timer_list *t, ferroce_timer_fn fn);
/* (Re)arms the timer to fire at ktime_get_ns() >= deadline_ns. */
void ferroce_timer_arm_ns(struct timer_list *t, u64 deadline_ns);
void ferroce_timer_cancel(struct timer_list *t);
void ferroce_timer_shutdown_sync(struct timer_list *t);

/* --- deferred work (struct work_struct stays opaque to Rust) --- */
typedef void (*ferroce_work_fn)(struct work_struct *w);
int ferroce_wq_create(void);
void ferroce_wq_destroy(void);
void ferroce_work_init(struct work_struct *w, ferroce_work_fn fn);
void ferroce_work_queue(struct work_struct *w);
/* A QP's work item (high priority), or the device's linger work (normal
 * priority), on a CPU other than the poster's (see helpers.c). */
void ferroce_qp_work_queue(struct work_struct *w);
void ferroce_qp_hi_work_queue(struct work_struct *w);
u64 ferroce_qp_hi_ns(void);
u64 ferroce_qp_lo_ns(void);
void ferroce_linger_work_queue(struct work_struct *w);
void ferroce_work_cancel_sync(struct work_struct *w);
/* Completion vectors: one per possible CPU, each bound to an online one. */
u32 ferroce_num_comp_vectors(void);
int ferroce_vector_cpu(u32 vector);
bool ferroce_comp_here(int cpu);
/* Queues a CQ's handler work on `cpu`; false when it is queued already. */
bool ferroce_comp_work_queue_on(struct work_struct *w, int cpu);
void ferroce_cond_resched(void);
void ferroce_usleep(unsigned long min_us, unsigned long max_us);
/* Pages of memory the machine has (totalram_pages). */
unsigned long ferroce_totalram_pages(void);

/* --- identities --- */
u32 ferroce_random_u32(void);
/* The test_pd_start module parameter (test only). */
u32 ferroce_test_pd_start(void);
/* The user_quota module parameter (0: the default quotas). */
u32 ferroce_user_quota(void);
/* The test_local_queue_max module parameter (test only). */
u32 ferroce_test_local_queue_max(void);

/* --- user memory named by a work request (inline data) --- */
int ferroce_copy_from_user(void *dst, u64 user_addr, size_t len);
bool ferroce_qp_is_user(const struct ib_qp *qp);

/* --- SRQ limit event (through the SRQ's event handler) --- */
void ferroce_srq_limit_event(struct ib_srq *srq);
void ferroce_cq_err_event(struct ib_cq *cq);
void ferroce_qp_event(struct ib_qp *qp, enum ib_event_type type);

/* --- the local delivery queue (struct sk_buff_head stays opaque) --- */
void ferroce_skbq_init(struct sk_buff_head *q);
void ferroce_skbq_tail(struct sk_buff_head *q, struct sk_buff *skb);
struct sk_buff *ferroce_skbq_dequeue(struct sk_buff_head *q);
bool ferroce_skbq_empty(const struct sk_buff_head *q);
u32 ferroce_skbq_len(const struct sk_buff_head *q);
void ferroce_skbq_purge(struct sk_buff_head *q);

/* Rings shared with a process (ferroce-abi.h). */
struct rdma_user_mmap_entry;
struct vm_area_struct;
struct ib_ucontext *ferroce_udata_ucontext(struct ib_udata *udata);
void *ferroce_ring_create(struct ib_ucontext *uctx, size_t len, u64 *offset,
			  struct rdma_user_mmap_entry **out);
void ferroce_ring_destroy(struct rdma_user_mmap_entry *entry);
int ferroce_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void ferroce_mmap_free(struct rdma_user_mmap_entry *entry);
void ferroce_ring_read(void *dst, const void *src, size_t len);
struct uverbs_attr_bundle;
struct ib_udata *ferroce_attrs_udata(struct uverbs_attr_bundle *attrs);
u32 ferroce_crc32_le(u32 crc, const u8 *p, size_t len);


/* --- on-demand paging (ib_umem_odp; helpers.c says how it is locked) --- */
struct ferroce_odp;
struct ferroce_odp *ferroce_odp_get(struct ib_device *dev, u64 start, u64 length, int access);
void ferroce_odp_ref(struct ferroce_odp *o);
/* Drops a reference; the last releases the umem (may sleep). */
void ferroce_odp_put(struct ferroce_odp *o);
u64 ferroce_odp_offset(const struct ferroce_odp *o);
/* Process context: faults [pos, pos + len) of the region's pages in (fault
 * false: takes only the pages present) and enters them in its table. */
int ferroce_odp_fault(struct ferroce_odp *o, u64 pos, u64 len, bool write, bool fault);
int ferroce_odp_prefetch_async(struct ferroce_odp *o, u64 pos, u64 len, bool write, bool fault);
/* Any context: 0, -EAGAIN (a page absent), -EFAULT (its fault failed),
 * -ERANGE, -EINVAL (a misaligned atomic). */
int ferroce_odp_present(struct ferroce_odp *o, u64 pos, u64 len, bool write);
int ferroce_odp_copy(struct ferroce_odp *o, u64 pos, void *buf, u32 len, bool to_pages);
int ferroce_odp_atomic(struct ferroce_odp *o, u64 pos, int op, u64 a, u64 b, u64 *old);
void ferroce_wq_flush(void);

#endif /* FERROCE_HELPERS_H */
