// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * uverbs_fuzz: a hostile, unprivileged user of /dev/infiniband/uverbs*.
 *
 *   uverbs_fuzz -d DEV [-s SEED] [-t SECONDS] [-g GID_INDEX] [-q]
 *               [--ioctl-get-context-again]
 *
 * Seeded and bounded in time. Until SECONDS have passed it runs phases,
 * each chosen by the seed and each lasting a fraction of a second to two
 * seconds:
 *
 *   raw        one thread sends commands to a context's uverbs file
 *              (ctx->cmd_fd) itself: the legacy write() format
 *              (ib_uverbs_cmd_hdr, and ib_uverbs_ex_cmd_hdr for the
 *              extended commands) and RDMA_VERBS_IOCTL (INVOKE_WRITE with
 *              the same bodies, and the native methods of every object),
 *              with live, stale and random handles, bad and short
 *              response pointers, wrong sizes, malformed attributes, random
 *              driver data (udata), double destroys; maps the rings the
 *              kernel answers (and random offsets), scribbles on them and
 *              rings doorbells; reads its completion channels and async
 *              event files
 *   raw-mt     the same from two to four threads on one file at once (one
 *              destroys what another uses)
 *   verbs      libibverbs objects (PD, MR, CQs with a completion channel,
 *              a connected RC pair, a UD QP with an AH, an SRQ with its own
 *              RC pair) and a thread that posts sends (SEND, WRITE, READ,
 *              atomics), receives and polls on them, while another thread
 *              destroys their kernel objects under it with raw commands,
 *              moves the QPs to ERR or RESET and back, resizes the CQs,
 *              and a third sends raw non-destroying commands at the same
 *              handles
 *   fork       the same objects with live mapped rings, then fork(): the
 *              child scribbles on the inherited rings, posts and polls
 *              through verbs, sends raw commands, opens a context of its
 *              own, and exits (or is killed) mid-way; the parent goes on
 *   close      a second context with verbs objects and raw ones, threads
 *              sending commands, and the file closed (close() or dup2() of
 *              /dev/null over it) from another thread mid-command, then its
 *              rings unmapped: the last reference goes while commands run
 *   rawfd      the uverbs device opened with open(2): commands before any
 *              context exists, GET_CONTEXT (twice, with bad sizes), then
 *              commands and maps, and close with everything live
 *
 * Every error a system call returns is counted by errno; none is fatal
 * (libibverbs' async-event and CQ-event paths, which dereference the
 * user_handle the kernel reports, are used only for objects libibverbs
 * created). Prints a progress line every few seconds and a summary at the
 * end: commands issued (write and ioctl) by errno class, verbs calls by
 * errno class, maps, forks and closes. Exits 0 once SECONDS have passed (the
 * kernel's health is for the caller to judge: dmesg, and the device still
 * working afterwards), 2 when the device cannot be opened, 3 when a phase
 * did not end within 60 seconds of its time (a hang).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/rdma/ferroce-abi.h"
#include "testlib.h"

#define PAGE 4096
#define SCRATCH (4u << 20)	/* response area of a thread */
#define CMDBUF (64u << 10)	/* a command as written */
#define MRBUF (4u << 20)	/* memory a target registers */
#define MAXOBJ 192
#define NSTALE 64
#define NFD 12

/* ------------------------------------------------------------ statistics */

#define NERR 134
enum { S_WRITE, S_IOCTL, S_VERBS, S_MMAP, S_NS };
static const char *const s_name[S_NS] = { "write", "ioctl", "verbs", "mmap" };
static atomic_ulong st[S_NS][NERR + 1]; /* [kind][errno], 0: success, NERR: other */
static atomic_ulong st_forks, st_child_exit, st_child_signal, st_child_killed, st_closes, st_phases;
static atomic_ulong st_created, st_destroyed, st_zombies, st_ring_writes, st_events, st_completions,
	st_wc_err;
static const char *phase_now = "setup";

static void count(int kind, int err)
{
	atomic_fetch_add_explicit(&st[kind][err >= 0 && err < NERR ? err : NERR], 1, memory_order_relaxed);
}

static unsigned long total(int kind)
{
	unsigned long n = 0;

	for (int i = 0; i <= NERR; i++)
		n += st[kind][i];
	return n;
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&t, NULL);
}

/* ------------------------------------------------------------ config */

static const char *dev_name;
static uint64_t seed = 1;
static double seconds = 20;
static int gid_index = -1;
static int quiet;
static struct ibv_device *device;
static union ibv_gid gid;
static struct ibv_port_attr port_attr;
static struct ibv_device_attr dev_attr;
static char uverbs_path[128];
static uint32_t driver_id; /* the device's: the kernel refuses an ioctl with another */
/*
 * GET_CONTEXT on a file that has a context, through the ioctl: off unless
 * --ioctl-get-context-again. The RDMA core leaks a reference to the calling
 * task there (7.2.13, drivers/infiniband/core): ib_alloc_ucontext() names
 * the new context after `current` (rdma_restrack_set_name(), which takes
 * get_task_struct()), ib_init_ucontext() refuses the second context with
 * EINVAL before any driver is called, and the ioctl handler
 * UVERBS_HANDLER(UVERBS_METHOD_GET_CONTEXT) (uverbs_std_types_device.c) then
 * only kfree()s the context, without the rdma_restrack_put() that the write
 * handler ib_uverbs_get_context() (uverbs_cmd.c) does on the same error.
 * Every such call leaves one task_struct allocated for ever (kmemleak
 * reports it on a debug kernel; userspace/tests/ctx_leak measures it). By
 * default the command goes through the legacy write() instead, so that a
 * leak report of a run on ferroce is ferroce's; tests/guest/fuzz.sh passes
 * the option only to its rdma_rxe report run. (The random ioctl of
 * one_native() avoids the same method unless the option is given.)
 */
static int ioctl_get_context_again;

/* memory for bad pointers: a page nobody may touch, one only readable */
static uint8_t *guard_page, *ro_page;

/* ------------------------------------------------------------ targets */

enum otype { OT_PD, OT_CQ, OT_QP, OT_SRQ, OT_AH, OT_MR, OT_CHAN, OT_ASYNC, OT_NTYPES };
static const int cap_of[OT_NTYPES] = { 10, 14, 14, 6, 20, 20, 4, 3 };

struct rmap {
	uint64_t off;
	uint32_t len;
	uint8_t *addr; /* mapped, or NULL */
};

struct obj {
	int type;
	uint32_t h;     /* handle (an fd for OT_CHAN and OT_ASYNC) */
	uint32_t num;   /* QPN, SRQN, lkey */
	uint32_t rkey;
	int qp_type;
	struct rmap m[2];
};

/*
 * One uverbs file and what is known to live in it. `nodestroy`: the file
 * of libibverbs objects; raw commands there neither create nor destroy
 * (libibverbs keeps per-object event counts that a foreign destroy would
 * break), only modify, query, post and poll.
 */
struct target {
	int fd;
	int async_fd;		/* readable async event file, or -1 */
	int nodestroy;
	int no_ring_touch;	/* rings may be unmapped under us (close phase) */
	pthread_mutex_t lock;
	struct obj o[MAXOBJ];
	int n;
	uint32_t stale[NSTALE];
	int nstale;
	uint32_t vh[32];	/* handles of libibverbs objects on this file */
	int nvh;
	uint32_t vqpn[8];
	int nvqpn;
	uint8_t *mrbuf;		/* MRBUF bytes to register */
	struct rmap dead[64];	/* maps of destroyed objects, unmapped later */
	int ndead;
};

/* the completion channel fds libibverbs reads: never named in a raw create */
static int protected_fd[16];
static int nprotected;
static pthread_mutex_t protected_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_protected(int fd)
{
	int r = 0;

	pthread_mutex_lock(&protected_lock);
	for (int i = 0; i < nprotected; i++)
		r |= protected_fd[i] == fd;
	pthread_mutex_unlock(&protected_lock);
	return r;
}

static void protect_fd(int fd, int on)
{
	pthread_mutex_lock(&protected_lock);
	if (on && nprotected < 16) {
		protected_fd[nprotected++] = fd;
	} else if (!on) {
		for (int i = 0; i < nprotected; i++)
			if (protected_fd[i] == fd) {
				protected_fd[i] = protected_fd[--nprotected];
				break;
			}
	}
	pthread_mutex_unlock(&protected_lock);
}

/*
 * Whether fd, answered by the kernel as a new completion channel or async
 * event file, is one: an "[infinibandevent]" file that is none of the
 * contexts' own (a garbled answer must not make us read or close
 * libibverbs' files).
 */
static int new_event_fd(int fd, int own_async)
{
	char path[64], link[128];
	ssize_t n;

	if (fd <= 2 || fd == own_async || is_protected(fd))
		return 0;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return 0;
	link[n] = 0;
	return strstr(link, "[infinibandevent]") != NULL;
}

/* A thread: its random stream and its buffers. */
struct th {
	uint64_t rng;
	uint8_t *scratch;	/* SCRATCH bytes, then a guard page */
	uint8_t *cmd;		/* CMDBUF bytes, then a guard page */
	uint8_t *in;		/* CMDBUF bytes of input data */
	struct target *t;
	atomic_int *stop;
	double end;
	int child;		/* in a forked child: no printing */
};

static uint64_t rnd(struct th *t)
{
	return tl_next(&t->rng);
}

static uint32_t rn(struct th *t, uint32_t n)
{
	return n ? (uint32_t)(rnd(t) % n) : 0;
}

static int chance(struct th *t, int percent)
{
	return rn(t, 100) < (uint32_t)percent;
}

static void fill_random(struct th *t, void *p, size_t len)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)rnd(t);
}

static void *map_anon(size_t len, int guard)
{
	uint8_t *p = mmap(NULL, len + (guard ? PAGE : 0), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("uverbs_fuzz: mmap");
		exit(2);
	}
	if (guard)
		mprotect(p + len, PAGE, PROT_NONE);
	return p;
}

static void th_init(struct th *t, uint64_t s, struct target *tg)
{
	memset(t, 0, sizeof(*t));
	t->rng = tl_seed(s);
	t->scratch = map_anon(SCRATCH, 1);
	t->cmd = map_anon(CMDBUF, 1);
	t->in = map_anon(CMDBUF, 1);
	t->t = tg;
}

static void th_free(struct th *t)
{
	munmap(t->scratch, SCRATCH + PAGE);
	munmap(t->cmd, CMDBUF + PAGE);
	munmap(t->in, CMDBUF + PAGE);
}

static int th_over(struct th *t)
{
	return (t->stop && atomic_load(t->stop)) || now() >= t->end;
}

/* An address the kernel must refuse to write (and mostly to read). */
static uint64_t bad_ptr(struct th *t)
{
	switch (rn(t, 7)) {
	case 0:
		return 0;
	case 1:
		return 1 + rn(t, PAGE - 1);
	case 2:
		return (uintptr_t)guard_page + rn(t, PAGE);
	case 3:
		return (uintptr_t)ro_page + rn(t, 64);
	case 4:
		return 0xffff888000000000ull + (rnd(t) & 0xfffffff000ull);
	case 5:
		return 0x8000000000000000ull | rnd(t);
	default: /* straddles the scratch area's end: the guard page follows */
		return (uintptr_t)t->scratch + SCRATCH - 1 - rn(t, 64);
	}
}

/* A pointer for data the kernel writes: mostly the scratch area. */
static uint64_t out_ptr(struct th *t)
{
	if (chance(t, 8))
		return bad_ptr(t);
	return (uintptr_t)t->scratch + (chance(t, 5) ? 1 + rn(t, 7) : 0);
}

/* ------------------------------------------------------------ object pools */

static void unmap_rmap(struct rmap *m)
{
	if (m->addr) {
		if (munmap(m->addr, m->len))
			count(S_MMAP, errno);
		m->addr = NULL;
	}
}

static int pool_count(struct target *tg, int type)
{
	int n = 0;

	for (int i = 0; i < tg->n; i++)
		n += tg->o[i].type == type;
	return n;
}

/* under tg->lock */
static void pool_add(struct target *tg, const struct obj *o)
{
	if (tg->n < MAXOBJ)
		tg->o[tg->n++] = *o;
	atomic_fetch_add(&st_created, 1);
}

/* under tg->lock: the object's maps go to the dead list (or are unmapped) */
static void retire_maps(struct target *tg, struct obj *o)
{
	for (int k = 0; k < 2; k++) {
		if (!o->m[k].addr)
			continue;
		if (tg->ndead < 64)
			tg->dead[tg->ndead++] = o->m[k];
		else
			unmap_rmap(&o->m[k]);
		o->m[k].addr = NULL;
	}
}

/* under tg->lock: a handle was destroyed */
static void pool_del(struct target *tg, int type, uint32_t h)
{
	for (int i = 0; i < tg->n; i++) {
		if (tg->o[i].h != h || (type >= 0 && tg->o[i].type != type))
			continue;
		retire_maps(tg, &tg->o[i]);
		tg->stale[tg->nstale++ % NSTALE] = h;
		tg->o[i] = tg->o[--tg->n];
		atomic_fetch_add(&st_destroyed, 1);
		return;
	}
	tg->stale[tg->nstale++ % NSTALE] = h;
}

/* under tg->lock: a random live object of `type`, or NULL */
static struct obj *pool_pick(struct th *t, int type)
{
	struct target *tg = t->t;
	int idx[MAXOBJ], n = 0;

	for (int i = 0; i < tg->n; i++)
		if (tg->o[i].type == type)
			idx[n++] = i;
	return n ? &tg->o[idx[rn(t, n)]] : NULL;
}

/* A handle for a command that wants an object of `type`. */
static uint32_t pick_handle(struct th *t, int type)
{
	struct target *tg = t->t;
	uint32_t h;
	int c = rn(t, 100);
	struct obj *o;

	pthread_mutex_lock(&tg->lock);
	if (c < 62 && (o = pool_pick(t, type)))
		h = o->h;
	else if (c < 72 && tg->nvh)
		h = tg->vh[rn(t, tg->nvh)];
	else if (c < 80 && tg->nstale)
		h = tg->stale[rn(t, tg->nstale < NSTALE ? tg->nstale : NSTALE)];
	else if (c < 86 && tg->n)
		h = tg->o[rn(t, tg->n)].h; /* another type's */
	else
		h = c < 92 ? rn(t, 40) : c < 96 ? 0xffffffffu - rn(t, 3) : (uint32_t)rnd(t);
	pthread_mutex_unlock(&tg->lock);
	return h;
}

/* A completion-channel fd for a raw create: never one libibverbs reads. */
static int pick_chan(struct th *t)
{
	struct target *tg = t->t;
	int c = rn(t, 100), fd = -1;
	struct obj *o;

	if (c < 45)
		return -1;
	pthread_mutex_lock(&tg->lock);
	if (c < 80 && (o = pool_pick(t, OT_CHAN)))
		fd = (int)o->h;
	else if (c < 86)
		fd = tg->fd;
	else if (c < 90)
		fd = tg->async_fd;
	else
		fd = c < 96 ? (int)rn(t, 64) : (int)rnd(t);
	pthread_mutex_unlock(&tg->lock);
	return is_protected(fd) ? -1 : fd;
}

static uint32_t pick_qpn(struct th *t)
{
	struct target *tg = t->t;
	uint32_t q = rn(t, 64);
	struct obj *o;

	pthread_mutex_lock(&tg->lock);
	if (chance(t, 60) && (o = pool_pick(t, OT_QP)))
		q = o->num;
	else if (chance(t, 50) && tg->nvqpn)
		q = tg->vqpn[rn(t, tg->nvqpn)];
	pthread_mutex_unlock(&tg->lock);
	return chance(t, 5) ? (uint32_t)rnd(t) : q;
}

/* Maps a ring the kernel answered; an address or NULL. */
static uint8_t *map_ring(struct th *t, uint64_t off, uint32_t len)
{
	uint8_t *p;

	if (!len || len > (64u << 20))
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, t->t->fd, (off_t)off);
	count(S_MMAP, p == MAP_FAILED ? errno : 0);
	if (p == MAP_FAILED)
		return NULL;
	return p;
}

/* The two {offset, length} pairs a driver answers for its rings (ferroce:
 * ferroce_ring_map, rdma_rxe: mminfo; both 16 bytes, offset first). */
static void parse_maps(struct th *t, struct obj *o, const uint8_t *drv, size_t drv_len, int nmaps)
{
	for (int k = 0; k < nmaps && (size_t)(k + 1) * 16 <= drv_len; k++) {
		uint64_t off;
		uint32_t len;

		memcpy(&off, drv + 16 * k, 8);
		memcpy(&len, drv + 16 * k + 8, 4);
		o->m[k].off = off;
		o->m[k].len = len;
		if (!t->t->no_ring_touch && chance(t, 85))
			o->m[k].addr = map_ring(t, off, len);
	}
}

/* ------------------------------------------------------------ commands */

/*
 * The legacy commands: body sizes (the core structure, without the
 * header), response sizes, whether driver data follows, what they make
 * or destroy. `ex`: an extended command (IB_USER_VERBS_CMD_FLAG_EXTENDED,
 * 8-byte words, ib_uverbs_ex_cmd_hdr, no response field in the body).
 */
struct cmdinfo {
	const char *name;
	uint16_t req, resp, drv_out; /* drv_out: driver response bytes we ask for */
	uint8_t ex, has_resp, creates, destroys, safe; /* safe: allowed on libibverbs' file */
};

#define LEG(c, n, rq, rs, d, hr, cr, de, sf) [c] = { n, rq, rs, d, 0, hr, cr, de, sf }
static const struct cmdinfo legacy[] = {
	LEG(IB_USER_VERBS_CMD_QUERY_DEVICE, "query_device", sizeof(struct ib_uverbs_query_device),
	    sizeof(struct ib_uverbs_query_device_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_QUERY_PORT, "query_port", sizeof(struct ib_uverbs_query_port),
	    sizeof(struct ib_uverbs_query_port_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_ALLOC_PD, "alloc_pd", sizeof(struct ib_uverbs_alloc_pd), sizeof(struct ib_uverbs_alloc_pd_resp),
	    0, 1, OT_PD + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_DEALLOC_PD, "dealloc_pd", sizeof(struct ib_uverbs_dealloc_pd), 0, 0, 0, 0, OT_PD + 1, 0),
	LEG(IB_USER_VERBS_CMD_CREATE_AH, "create_ah", sizeof(struct ib_uverbs_create_ah),
	    sizeof(struct ib_uverbs_create_ah_resp), 8, 1, OT_AH + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_DESTROY_AH, "destroy_ah", sizeof(struct ib_uverbs_destroy_ah), 0, 0, 0, 0, OT_AH + 1, 0),
	LEG(IB_USER_VERBS_CMD_REG_MR, "reg_mr", sizeof(struct ib_uverbs_reg_mr), sizeof(struct ib_uverbs_reg_mr_resp), 0, 1,
	    OT_MR + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_REREG_MR, "rereg_mr", sizeof(struct ib_uverbs_rereg_mr),
	    sizeof(struct ib_uverbs_rereg_mr_resp), 0, 1, 0, 0, 0),
	LEG(IB_USER_VERBS_CMD_DEREG_MR, "dereg_mr", sizeof(struct ib_uverbs_dereg_mr), 0, 0, 0, 0, OT_MR + 1, 0),
	LEG(IB_USER_VERBS_CMD_ALLOC_MW, "alloc_mw", sizeof(struct ib_uverbs_alloc_mw), sizeof(struct ib_uverbs_alloc_mw_resp),
	    0, 1, 0, 0, 0),
	LEG(IB_USER_VERBS_CMD_DEALLOC_MW, "dealloc_mw", sizeof(struct ib_uverbs_dealloc_mw), 0, 0, 0, 0, 0, 0),
	LEG(IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, "create_comp_channel", sizeof(struct ib_uverbs_create_comp_channel),
	    sizeof(struct ib_uverbs_create_comp_channel_resp), 0, 1, OT_CHAN + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_CREATE_CQ, "create_cq", sizeof(struct ib_uverbs_create_cq),
	    sizeof(struct ib_uverbs_create_cq_resp), 16, 1, OT_CQ + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_RESIZE_CQ, "resize_cq", sizeof(struct ib_uverbs_resize_cq),
	    sizeof(struct ib_uverbs_resize_cq_resp), 16, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_DESTROY_CQ, "destroy_cq", sizeof(struct ib_uverbs_destroy_cq),
	    sizeof(struct ib_uverbs_destroy_cq_resp), 0, 1, 0, OT_CQ + 1, 0),
	LEG(IB_USER_VERBS_CMD_POLL_CQ, "poll_cq", sizeof(struct ib_uverbs_poll_cq), sizeof(struct ib_uverbs_poll_cq_resp), 0,
	    1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_PEEK_CQ, "peek_cq", 16, 8, 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ, "req_notify_cq", sizeof(struct ib_uverbs_req_notify_cq), 0, 0, 0, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_CREATE_QP, "create_qp", sizeof(struct ib_uverbs_create_qp),
	    sizeof(struct ib_uverbs_create_qp_resp), 40, 1, OT_QP + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_QUERY_QP, "query_qp", sizeof(struct ib_uverbs_query_qp), sizeof(struct ib_uverbs_query_qp_resp),
	    0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_MODIFY_QP, "modify_qp", sizeof(struct ib_uverbs_modify_qp), 0, 0, 0, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_DESTROY_QP, "destroy_qp", sizeof(struct ib_uverbs_destroy_qp),
	    sizeof(struct ib_uverbs_destroy_qp_resp), 0, 1, 0, OT_QP + 1, 0),
	LEG(IB_USER_VERBS_CMD_POST_SEND, "post_send", sizeof(struct ib_uverbs_post_send),
	    sizeof(struct ib_uverbs_post_send_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_POST_RECV, "post_recv", sizeof(struct ib_uverbs_post_recv),
	    sizeof(struct ib_uverbs_post_recv_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_ATTACH_MCAST, "attach_mcast", sizeof(struct ib_uverbs_attach_mcast), 0, 0, 0, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_DETACH_MCAST, "detach_mcast", sizeof(struct ib_uverbs_detach_mcast), 0, 0, 0, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_CREATE_SRQ, "create_srq", sizeof(struct ib_uverbs_create_srq),
	    sizeof(struct ib_uverbs_create_srq_resp), 24, 1, OT_SRQ + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_MODIFY_SRQ, "modify_srq", sizeof(struct ib_uverbs_modify_srq), 0, 0, 0, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_QUERY_SRQ, "query_srq", sizeof(struct ib_uverbs_query_srq),
	    sizeof(struct ib_uverbs_query_srq_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_DESTROY_SRQ, "destroy_srq", sizeof(struct ib_uverbs_destroy_srq),
	    sizeof(struct ib_uverbs_destroy_srq_resp), 0, 1, 0, OT_SRQ + 1, 0),
	LEG(IB_USER_VERBS_CMD_POST_SRQ_RECV, "post_srq_recv", sizeof(struct ib_uverbs_post_srq_recv),
	    sizeof(struct ib_uverbs_post_srq_recv_resp), 0, 1, 0, 0, 1),
	LEG(IB_USER_VERBS_CMD_OPEN_XRCD, "open_xrcd", sizeof(struct ib_uverbs_open_xrcd),
	    sizeof(struct ib_uverbs_open_xrcd_resp), 0, 1, 0, 0, 0),
	LEG(IB_USER_VERBS_CMD_CLOSE_XRCD, "close_xrcd", sizeof(struct ib_uverbs_close_xrcd), 0, 0, 0, 0, 0, 0),
	LEG(IB_USER_VERBS_CMD_CREATE_XSRQ, "create_xsrq", sizeof(struct ib_uverbs_create_xsrq),
	    sizeof(struct ib_uverbs_create_srq_resp), 24, 1, OT_SRQ + 1, 0, 0),
	LEG(IB_USER_VERBS_CMD_OPEN_QP, "open_qp", sizeof(struct ib_uverbs_open_qp), sizeof(struct ib_uverbs_create_qp_resp), 0,
	    1, 0, 0, 0),
};
#define NLEGACY ((int)(sizeof(legacy) / sizeof(legacy[0])))

#define EX(c, n, rq, rs, d, cr, sf) [c] = { n, rq, rs, d, 1, 1, cr, 0, sf }
static const struct cmdinfo extended[] = {
	EX(IB_USER_VERBS_EX_CMD_QUERY_DEVICE, "ex_query_device", sizeof(struct ib_uverbs_ex_query_device),
	   sizeof(struct ib_uverbs_ex_query_device_resp), 0, 0, 1),
	EX(IB_USER_VERBS_EX_CMD_CREATE_CQ, "ex_create_cq", sizeof(struct ib_uverbs_ex_create_cq),
	   sizeof(struct ib_uverbs_ex_create_cq_resp), 16, OT_CQ + 1, 0),
	EX(IB_USER_VERBS_EX_CMD_CREATE_QP, "ex_create_qp", sizeof(struct ib_uverbs_ex_create_qp),
	   sizeof(struct ib_uverbs_ex_create_qp_resp), 40, OT_QP + 1, 0),
	EX(IB_USER_VERBS_EX_CMD_MODIFY_QP, "ex_modify_qp", sizeof(struct ib_uverbs_ex_modify_qp),
	   sizeof(struct ib_uverbs_ex_modify_qp_resp), 0, 0, 1),
	EX(IB_USER_VERBS_EX_CMD_CREATE_FLOW, "ex_create_flow", sizeof(struct ib_uverbs_create_flow) + 16,
	   sizeof(struct ib_uverbs_create_flow_resp), 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_DESTROY_FLOW, "ex_destroy_flow", sizeof(struct ib_uverbs_destroy_flow), 0, 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_CREATE_WQ, "ex_create_wq", sizeof(struct ib_uverbs_ex_create_wq),
	   sizeof(struct ib_uverbs_ex_create_wq_resp), 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_MODIFY_WQ, "ex_modify_wq", sizeof(struct ib_uverbs_ex_modify_wq), 0, 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_DESTROY_WQ, "ex_destroy_wq", sizeof(struct ib_uverbs_ex_destroy_wq),
	   sizeof(struct ib_uverbs_ex_destroy_wq_resp), 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL, "ex_create_rwq_ind_tbl",
	   sizeof(struct ib_uverbs_ex_create_rwq_ind_table) + 8, sizeof(struct ib_uverbs_ex_create_rwq_ind_table_resp), 0, 0,
	   0),
	EX(IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL, "ex_destroy_rwq_ind_tbl",
	   sizeof(struct ib_uverbs_ex_destroy_rwq_ind_table), 0, 0, 0, 0),
	EX(IB_USER_VERBS_EX_CMD_MODIFY_CQ, "ex_modify_cq", sizeof(struct ib_uverbs_ex_modify_cq), 0, 0, 0, 1),
};
#define NEXTENDED ((int)(sizeof(extended) / sizeof(extended[0])))

/* A command being built: its body (the core structure) and what to ask. */
struct wcmd {
	uint32_t cmd;		/* with IB_USER_VERBS_CMD_FLAG_EXTENDED for ex */
	const struct cmdinfo *ci;
	uint8_t *body;		/* th->in */
	size_t len;		/* body bytes (core structure and what a post carries) */
	size_t drv_in;		/* random driver data bytes after the body */
	size_t resp_len;	/* core response bytes asked for */
	size_t drv_out;		/* driver response bytes asked for */
	uint64_t resp;		/* where the response goes */
	uint32_t h;		/* the handle it names (for a destroy's bookkeeping) */
	int qp_type;
};

static const uint32_t small_or_wild[] = { 0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 4096 };

/*
 * A count (queue depth, SGEs): mostly small, sometimes at or past a limit.
 * "At the limit" stays within what a guest can afford, 16384 (rdma_rxe
 * advertises 2^20 WRs of 32 SGEs: a few of those exhaust the guest's memory,
 * which nothing charges to the process); past it is refused, whatever the
 * limit.
 */
#define QTY_AFFORD 16384u
static uint32_t qty(struct th *t, uint32_t limit)
{
	int c = rn(t, 100);

	if (c < 72)
		return 1 + rn(t, 64);
	if (c < 82)
		return small_or_wild[rn(t, sizeof(small_or_wild) / sizeof(small_or_wild[0]))];
	if (c < 86)
		return limit <= QTY_AFFORD ? limit : QTY_AFFORD;
	if (c < 93)
		return limit + 1;
	if (c < 97)
		return 0xffffffffu;
	return (uint32_t)rnd(t) | (limit > QTY_AFFORD ? 0x80000000u : 0); /* (refused) */
}

static void fill_gid(struct th *t, uint8_t *g)
{
	int c = rn(t, 100);

	/* (an address nobody answers costs the core's neighbour lookup, about
	 * a second: those are rare) */
	memset(g, 0, 16);
	if (c < 80) {
		memcpy(g, gid.raw, 16);
	} else if (c < 84) { /* the guest's gateway, or another address on its link */
		g[10] = g[11] = 0xff;
		g[12] = 10;
		g[13] = 0;
		g[14] = 2;
		g[15] = c < 83 ? 2 : (uint8_t)rn(t, 256);
	} else if (c < 90) {
		g[0] = 0xff;
		g[1] = 0x0e;
		g[15] = (uint8_t)rnd(t);
	} else if (c < 91) {
		g[0] = 0xfe;
		g[1] = 0x80;
		fill_random(t, g + 8, 8);
	} else if (c < 94) {
		/* all zero */
	} else {
		fill_random(t, g, 16);
	}
}

static void fill_ah_attr(struct th *t, struct ib_uverbs_ah_attr *a)
{
	fill_gid(t, a->grh.dgid);
	a->grh.flow_label = chance(t, 80) ? 0 : (uint32_t)rnd(t);
	a->grh.sgid_index = chance(t, 85) ? (uint8_t)gid_index : (uint8_t)rnd(t);
	a->grh.hop_limit = chance(t, 80) ? 64 : (uint8_t)rnd(t);
	a->grh.traffic_class = chance(t, 80) ? 0 : (uint8_t)rnd(t);
	a->dlid = chance(t, 90) ? 0 : (uint16_t)rnd(t);
	a->sl = chance(t, 85) ? 0 : (uint8_t)rnd(t);
	a->src_path_bits = chance(t, 90) ? 0 : (uint8_t)rnd(t);
	a->static_rate = chance(t, 90) ? 0 : (uint8_t)rnd(t);
	a->is_global = chance(t, 92) ? 1 : (uint8_t)rn(t, 3);
	a->port_num = chance(t, 92) ? 1 : (uint8_t)rnd(t);
}

static void fill_qp_dest(struct th *t, struct ib_uverbs_qp_dest *d)
{
	struct ib_uverbs_ah_attr a;

	memset(&a, 0, sizeof(a));
	fill_ah_attr(t, &a);
	memcpy(d->dgid, a.grh.dgid, 16);
	d->flow_label = a.grh.flow_label;
	d->dlid = a.dlid;
	d->sgid_index = a.grh.sgid_index;
	d->hop_limit = a.grh.hop_limit;
	d->traffic_class = a.grh.traffic_class;
	d->sl = a.sl;
	d->src_path_bits = a.src_path_bits;
	d->static_rate = a.static_rate;
	d->is_global = a.is_global;
	d->port_num = a.port_num;
}

static uint32_t access_flags(struct th *t)
{
	static const uint32_t f[] = {
		IBV_ACCESS_LOCAL_WRITE,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		IBV_ACCESS_REMOTE_WRITE, /* without LOCAL_WRITE: refused */
		IBV_ACCESS_REMOTE_ATOMIC,
		0,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND,
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING,
	};

	return chance(t, 92) ? f[rn(t, sizeof(f) / sizeof(f[0]))] : (uint32_t)rnd(t);
}

/* A buffer range for a registration: inside the target's buffer mostly. */
static void mr_range(struct th *t, __u64 *start, __u64 *length)
{
	uint8_t *b = t->t->mrbuf;
	int c = rn(t, 100);
	uint64_t off = chance(t, 80) ? (uint64_t)rn(t, MRBUF / PAGE) * PAGE : rn(t, MRBUF);

	*start = (uintptr_t)b + off;
	*length = 1 + rn(t, (uint32_t)(MRBUF - off));
	if (c < 6) {
		*length = 0;
	} else if (c < 12) {
		*length = MRBUF - off + PAGE * (1 + rn(t, 4)); /* past the buffer */
	} else if (c < 17) {
		*start = (uintptr_t)ro_page;
		*length = PAGE;
	} else if (c < 21) {
		*start = (uintptr_t)guard_page;
		*length = PAGE;
	} else if (c < 25) {
		*start = bad_ptr(t);
	} else if (c < 28) {
		*length = ~0ull - rn(t, 3);
	}
}

static const int qp_types[] = { IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_RC, IBV_QPT_UD, IBV_QPT_UD, IBV_QPT_UC,
				IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, 0, 1 };

static int pick_qp_type(struct th *t)
{
	return chance(t, 95) ? qp_types[rn(t, sizeof(qp_types) / sizeof(qp_types[0]))] : (int)rn(t, 256);
}

/* A modify_qp body: a plausible transition, or anything. */
static void fill_modify(struct th *t, struct ib_uverbs_modify_qp *m, uint32_t h, int qpt)
{
	int state = chance(t, 85) ? (int)rn(t, 7) : (int)rn(t, 256);

	memset(m, 0, sizeof(*m));
	m->qp_handle = h;
	m->qp_state = (uint8_t)state;
	m->attr_mask = IBV_QP_STATE;
	switch (state) {
	case IBV_QPS_INIT:
		m->attr_mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | (qpt == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
		m->port_num = chance(t, 90) ? 1 : (uint8_t)rnd(t);
		m->pkey_index = chance(t, 90) ? 0 : (uint16_t)rnd(t);
		m->qkey = chance(t, 70) ? 0x11111111 : (uint32_t)rnd(t);
		m->qp_access_flags = access_flags(t);
		break;
	case IBV_QPS_RTR:
		if (qpt != IBV_QPT_UD)
			m->attr_mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		fill_qp_dest(t, &m->dest);
		m->path_mtu = chance(t, 85) ? (uint8_t)(1 + rn(t, 5)) : (uint8_t)rnd(t);
		m->dest_qp_num = pick_qpn(t);
		m->rq_psn = chance(t, 80) ? 1 : (uint32_t)rnd(t);
		m->max_dest_rd_atomic = chance(t, 80) ? (uint8_t)rn(t, 17) : (uint8_t)rnd(t);
		m->min_rnr_timer = (uint8_t)rn(t, 32);
		break;
	case IBV_QPS_RTS:
		m->attr_mask |= IBV_QP_SQ_PSN;
		if (qpt != IBV_QPT_UD)
			m->attr_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
		m->sq_psn = chance(t, 80) ? 1 : (uint32_t)rnd(t);
		m->timeout = chance(t, 80) ? (uint8_t)(8 + rn(t, 8)) : (uint8_t)rnd(t);
		m->retry_cnt = (uint8_t)rn(t, chance(t, 90) ? 8 : 256);
		m->rnr_retry = (uint8_t)rn(t, chance(t, 90) ? 8 : 256);
		m->max_rd_atomic = chance(t, 80) ? (uint8_t)rn(t, 17) : (uint8_t)rnd(t);
		break;
	case IBV_QPS_SQD:
		m->en_sqd_async_notify = (uint8_t)rn(t, 2);
		if (chance(t, 50))
			m->attr_mask |= IBV_QP_EN_SQD_ASYNC_NOTIFY;
		break;
	default:
		break;
	}
	if (chance(t, 15)) {
		m->attr_mask ^= (uint32_t)rnd(t) & ((1u << 27) - 1);
		m->cur_qp_state = (uint8_t)rn(t, 8);
		m->path_mig_state = (uint8_t)rn(t, 4);
		m->alt_port_num = (uint8_t)rn(t, 3);
		m->alt_timeout = (uint8_t)rnd(t);
		m->alt_pkey_index = (uint16_t)rn(t, 3);
		fill_qp_dest(t, &m->alt_dest);
	}
	if (chance(t, 4))
		fill_random(t, m, sizeof(*m)), m->qp_handle = h;
}

/* The work requests of a raw post: a list the core parses, then SGEs. */
static size_t fill_post(struct th *t, uint8_t *body, size_t hdr_size, int kind)
{
	/* kind 0: send, 1: recv, 2: srq recv; all three headers have the same layout */
	struct ib_uverbs_post_send *p = (void *)body;
	uint32_t wrs = chance(t, 45) ? 0 : 1 + rn(t, 4);
	uint32_t sges = wrs ? rn(t, 2 * wrs + 1) : 0;
	size_t wsz = kind ? sizeof(struct ib_uverbs_recv_wr) : sizeof(struct ib_uverbs_send_wr);
	size_t wqe = chance(t, 85) ? wsz : chance(t, 50) ? wsz - 8 * (1 + rn(t, 3)) : wsz + 8 * rn(t, 8);
	size_t len;

	p->qp_handle = pick_handle(t, kind == 2 ? OT_SRQ : OT_QP);
	if (wqe > 512)
		wqe = wsz;
	len = hdr_size + wrs * wqe + sges * sizeof(struct ib_uverbs_sge);
	if (len > CMDBUF / 4)
		len = hdr_size, wrs = sges = 0;
	fill_random(t, body + hdr_size, len - hdr_size);
	for (uint32_t i = 0; i < wrs && wqe >= wsz; i++) {
		uint8_t *w = body + hdr_size + i * wqe;

		if (kind == 0) {
			struct ib_uverbs_send_wr *s = (void *)w;

			s->num_sge = chance(t, 80) ? rn(t, 3) : (uint32_t)rnd(t);
			s->opcode = chance(t, 85) ? rn(t, 16) : (uint32_t)rnd(t);
			s->send_flags = chance(t, 80) ? (uint32_t)rn(t, 16) : (uint32_t)rnd(t);
			s->wr.ud.ah = pick_handle(t, OT_AH);
			s->wr.ud.remote_qpn = pick_qpn(t);
		} else {
			struct ib_uverbs_recv_wr *r = (void *)w;

			r->num_sge = chance(t, 80) ? rn(t, 3) : (uint32_t)rnd(t);
		}
	}
	for (uint32_t i = 0; i < sges; i++) {
		struct ib_uverbs_sge *g = (void *)(body + hdr_size + wrs * wqe + i * sizeof(*g));
		__u64 st, ln;

		mr_range(t, &st, &ln);
		g->addr = st;
		g->length = (uint32_t)ln;
		g->lkey = chance(t, 50) ? pick_handle(t, OT_MR) : (uint32_t)rnd(t);
	}
	p->wr_count = chance(t, 90) ? wrs : chance(t, 50) ? wrs + 1 + rn(t, 4) : (uint32_t)rnd(t);
	p->sge_count = chance(t, 90) ? sges : (uint32_t)rnd(t);
	p->wqe_size = chance(t, 95) ? (uint32_t)wqe : (uint32_t)rnd(t);
	return len;
}

/*
 * Builds legacy or extended command `cmd` (0..255, flag for ex) in w.
 * Returns 0, or -1 when this command is not for this target.
 */
static int build(struct th *t, struct wcmd *w, uint32_t cmd)
{
	int ex = !!(cmd & IB_USER_VERBS_CMD_FLAG_EXTENDED);
	uint32_t idx = cmd & IB_USER_VERBS_CMD_COMMAND_MASK;
	const struct cmdinfo *ci = NULL;
	uint8_t *b = t->in;

	if (!ex && idx < (uint32_t)NLEGACY && legacy[idx].name)
		ci = &legacy[idx];
	if (ex && idx < (uint32_t)NEXTENDED && extended[idx].name)
		ci = &extended[idx];
	memset(w, 0, sizeof(*w));
	w->cmd = cmd;
	w->ci = ci;
	w->body = b;
	w->qp_type = -1;
	if (!ci) { /* no such command: random bytes */
		w->len = 8 * rn(t, 32);
		fill_random(t, b, w->len);
		w->resp_len = 4 * rn(t, 64);
		w->resp = out_ptr(t);
		return t->t->nodestroy ? -1 : 0;
	}
	if (t->t->nodestroy && !ci->safe)
		return -1;
	w->len = ci->req;
	memset(b, 0, w->len + 64);
	w->resp_len = ci->resp;
	w->drv_out = ci->drv_out;
	w->resp = out_ptr(t);

	switch (cmd) {
	case IB_USER_VERBS_CMD_QUERY_PORT: {
		struct ib_uverbs_query_port *c = (void *)b;

		c->port_num = chance(t, 85) ? 1 : (uint8_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_DEALLOC_PD:
		w->h = ((struct ib_uverbs_dealloc_pd *)b)->pd_handle = pick_handle(t, OT_PD);
		break;
	case IB_USER_VERBS_CMD_CREATE_AH: {
		struct ib_uverbs_create_ah *c = (void *)b;

		c->user_handle = rnd(t);
		c->pd_handle = pick_handle(t, OT_PD);
		fill_ah_attr(t, &c->attr);
		break;
	}
	case IB_USER_VERBS_CMD_DESTROY_AH:
		w->h = ((struct ib_uverbs_destroy_ah *)b)->ah_handle = pick_handle(t, OT_AH);
		break;
	case IB_USER_VERBS_CMD_REG_MR: {
		struct ib_uverbs_reg_mr *c = (void *)b;

		mr_range(t, &c->start, &c->length);
		c->hca_va = chance(t, 80) ? c->start : rnd(t);
		c->pd_handle = pick_handle(t, OT_PD);
		c->access_flags = access_flags(t);
		break;
	}
	case IB_USER_VERBS_CMD_REREG_MR: {
		struct ib_uverbs_rereg_mr *c = (void *)b;

		c->mr_handle = pick_handle(t, OT_MR);
		c->flags = rn(t, 16);
		mr_range(t, &c->start, &c->length);
		c->hca_va = c->start;
		c->pd_handle = pick_handle(t, OT_PD);
		c->access_flags = access_flags(t);
		break;
	}
	case IB_USER_VERBS_CMD_DEREG_MR:
		w->h = ((struct ib_uverbs_dereg_mr *)b)->mr_handle = pick_handle(t, OT_MR);
		break;
	case IB_USER_VERBS_CMD_ALLOC_MW: {
		struct ib_uverbs_alloc_mw *c = (void *)b;

		c->pd_handle = pick_handle(t, OT_PD);
		c->mw_type = (uint8_t)rn(t, 4);
		break;
	}
	case IB_USER_VERBS_CMD_DEALLOC_MW:
		((struct ib_uverbs_dealloc_mw *)b)->mw_handle = pick_handle(t, OT_MR);
		break;
	case IB_USER_VERBS_CMD_CREATE_CQ: {
		struct ib_uverbs_create_cq *c = (void *)b;

		c->user_handle = rnd(t);
		c->cqe = qty(t, (uint32_t)dev_attr.max_cqe);
		c->comp_vector = chance(t, 85) ? 0 : (uint32_t)rnd(t);
		c->comp_channel = pick_chan(t);
		c->reserved = chance(t, 95) ? 0 : (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_RESIZE_CQ: {
		struct ib_uverbs_resize_cq *c = (void *)b;

		w->h = c->cq_handle = pick_handle(t, OT_CQ);
		c->cqe = qty(t, (uint32_t)dev_attr.max_cqe);
		break;
	}
	case IB_USER_VERBS_CMD_DESTROY_CQ:
		w->h = ((struct ib_uverbs_destroy_cq *)b)->cq_handle = pick_handle(t, OT_CQ);
		break;
	case IB_USER_VERBS_CMD_POLL_CQ: {
		struct ib_uverbs_poll_cq *c = (void *)b;

		c->cq_handle = pick_handle(t, OT_CQ);
		/* the kernel writes up to ne completions after the response
		 * header whatever out_words says: ne stays within scratch */
		c->ne = chance(t, 80) ? rn(t, 33) : rn(t, (SCRATCH - PAGE) / sizeof(struct ib_uverbs_wc));
		if (w->resp - (uintptr_t)t->scratch >= SCRATCH && chance(t, 50))
			c->ne = 0xffffffffu; /* only where the kernel cannot write */
		break;
	}
	case IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: {
		struct ib_uverbs_req_notify_cq *c = (void *)b;

		c->cq_handle = pick_handle(t, OT_CQ);
		c->solicited_only = chance(t, 90) ? rn(t, 2) : (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_CREATE_QP:
	case IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_QP: {
		/* the legacy and extended bodies share their first fields
		 * (after the legacy response field) */
		struct ib_uverbs_ex_create_qp *c = (void *)(ex ? b : b + 8);
		int srq = chance(t, 20);

		c->user_handle = rnd(t);
		c->pd_handle = pick_handle(t, OT_PD);
		c->send_cq_handle = pick_handle(t, OT_CQ);
		c->recv_cq_handle = chance(t, 60) ? c->send_cq_handle : pick_handle(t, OT_CQ);
		c->srq_handle = srq || chance(t, 5) ? pick_handle(t, OT_SRQ) : 0;
		c->max_send_wr = qty(t, (uint32_t)dev_attr.max_qp_wr);
		c->max_recv_wr = qty(t, (uint32_t)dev_attr.max_qp_wr);
		c->max_send_sge = chance(t, 80) ? 1 + rn(t, 4) : qty(t, (uint32_t)dev_attr.max_sge);
		c->max_recv_sge = chance(t, 80) ? 1 + rn(t, 4) : qty(t, (uint32_t)dev_attr.max_sge);
		c->max_inline_data = chance(t, 70) ? rn(t, 65) : qty(t, 64);
		c->sq_sig_all = (uint8_t)rn(t, chance(t, 95) ? 2 : 256);
		w->qp_type = pick_qp_type(t);
		c->qp_type = (uint8_t)w->qp_type;
		c->is_srq = (uint8_t)(srq ? 1 : chance(t, 3) ? rnd(t) : 0);
		if (ex) {
			c->comp_mask = chance(t, 85) ? 0 : (uint32_t)rnd(t);
			c->create_flags = chance(t, 85) ? 0 : (uint32_t)rnd(t);
			c->rwq_ind_tbl_handle = chance(t, 90) ? 0 : pick_handle(t, OT_QP);
			c->source_qpn = chance(t, 90) ? 0 : pick_qpn(t);
		}
		break;
	}
	case IB_USER_VERBS_CMD_QUERY_QP: {
		struct ib_uverbs_query_qp *c = (void *)b;

		c->qp_handle = pick_handle(t, OT_QP);
		c->attr_mask = chance(t, 70) ? (uint32_t)rnd(t) & ((1u << 26) - 1) : (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_MODIFY_QP:
	case IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_QP: {
		uint32_t h = pick_handle(t, OT_QP);
		int qpt = IBV_QPT_RC;
		struct obj *o;

		pthread_mutex_lock(&t->t->lock);
		for (int i = 0; i < t->t->n; i++) {
			o = &t->t->o[i];
			if (o->type == OT_QP && o->h == h)
				qpt = o->qp_type;
		}
		pthread_mutex_unlock(&t->t->lock);
		fill_modify(t, (struct ib_uverbs_modify_qp *)b, h, qpt);
		if (ex) {
			struct ib_uverbs_ex_modify_qp *e = (void *)b;

			e->rate_limit = chance(t, 90) ? 0 : (uint32_t)rnd(t);
			if (chance(t, 10))
				e->base.attr_mask |= IBV_QP_RATE_LIMIT;
		}
		break;
	}
	case IB_USER_VERBS_CMD_DESTROY_QP:
		w->h = ((struct ib_uverbs_destroy_qp *)b)->qp_handle = pick_handle(t, OT_QP);
		break;
	case IB_USER_VERBS_CMD_POST_SEND:
		w->len = fill_post(t, b, sizeof(struct ib_uverbs_post_send), 0);
		break;
	case IB_USER_VERBS_CMD_POST_RECV:
		w->len = fill_post(t, b, sizeof(struct ib_uverbs_post_recv), 1);
		break;
	case IB_USER_VERBS_CMD_POST_SRQ_RECV:
		w->len = fill_post(t, b, sizeof(struct ib_uverbs_post_srq_recv), 2);
		break;
	case IB_USER_VERBS_CMD_ATTACH_MCAST:
	case IB_USER_VERBS_CMD_DETACH_MCAST: {
		struct ib_uverbs_attach_mcast *c = (void *)b;

		fill_gid(t, c->gid);
		if (chance(t, 60))
			c->gid[0] = 0xff;
		c->qp_handle = pick_handle(t, OT_QP);
		c->mlid = (uint16_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_CREATE_SRQ: {
		struct ib_uverbs_create_srq *c = (void *)b;

		c->user_handle = rnd(t);
		c->pd_handle = pick_handle(t, OT_PD);
		c->max_wr = qty(t, (uint32_t)dev_attr.max_srq_wr);
		c->max_sge = chance(t, 80) ? 1 + rn(t, 4) : qty(t, (uint32_t)dev_attr.max_srq_sge);
		c->srq_limit = chance(t, 70) ? rn(t, 16) : (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_CREATE_XSRQ: {
		struct ib_uverbs_create_xsrq *c = (void *)b;

		c->user_handle = rnd(t);
		c->srq_type = chance(t, 60) ? 0 : rn(t, 5);
		c->pd_handle = pick_handle(t, OT_PD);
		c->max_wr = qty(t, (uint32_t)dev_attr.max_srq_wr);
		c->max_sge = 1 + rn(t, 4);
		c->srq_limit = rn(t, 16);
		c->max_num_tags = rn(t, 4);
		c->xrcd_handle = pick_handle(t, OT_PD);
		c->cq_handle = pick_handle(t, OT_CQ);
		break;
	}
	case IB_USER_VERBS_CMD_MODIFY_SRQ: {
		struct ib_uverbs_modify_srq *c = (void *)b;

		c->srq_handle = pick_handle(t, OT_SRQ);
		c->attr_mask = chance(t, 80) ? 1 + rn(t, 3) : (uint32_t)rnd(t);
		c->max_wr = qty(t, (uint32_t)dev_attr.max_srq_wr);
		c->srq_limit = chance(t, 70) ? rn(t, 64) : (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_QUERY_SRQ:
		((struct ib_uverbs_query_srq *)b)->srq_handle = pick_handle(t, OT_SRQ);
		break;
	case IB_USER_VERBS_CMD_DESTROY_SRQ:
		w->h = ((struct ib_uverbs_destroy_srq *)b)->srq_handle = pick_handle(t, OT_SRQ);
		break;
	case IB_USER_VERBS_CMD_OPEN_XRCD: {
		struct ib_uverbs_open_xrcd *c = (void *)b;

		c->fd = chance(t, 50) ? 0xffffffffu : rn(t, 32);
		c->oflags = (uint32_t)rnd(t);
		break;
	}
	case IB_USER_VERBS_CMD_CLOSE_XRCD:
		((struct ib_uverbs_close_xrcd *)b)->xrcd_handle = pick_handle(t, OT_PD);
		break;
	case IB_USER_VERBS_CMD_OPEN_QP: {
		struct ib_uverbs_open_qp *c = (void *)b;

		c->user_handle = rnd(t);
		c->pd_handle = pick_handle(t, OT_PD);
		c->qpn = pick_qpn(t);
		c->qp_type = (uint8_t)pick_qp_type(t);
		break;
	}
	case IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_QUERY_DEVICE:
		((struct ib_uverbs_ex_query_device *)b)->comp_mask = chance(t, 80) ? 0 : (uint32_t)rnd(t);
		break;
	case IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_CQ: {
		struct ib_uverbs_ex_create_cq *c = (void *)b;

		c->user_handle = rnd(t);
		c->cqe = qty(t, (uint32_t)dev_attr.max_cqe);
		c->comp_vector = chance(t, 85) ? 0 : (uint32_t)rnd(t);
		c->comp_channel = pick_chan(t);
		c->comp_mask = chance(t, 85) ? 0 : (uint32_t)rnd(t);
		c->flags = chance(t, 80) ? 0 : (uint32_t)rnd(t) & 7;
		break;
	}
	case IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_CQ: {
		struct ib_uverbs_ex_modify_cq *c = (void *)b;

		c->cq_handle = pick_handle(t, OT_CQ);
		c->attr_mask = rn(t, 4);
		c->attr.cq_count = (uint16_t)rnd(t);
		c->attr.cq_period = (uint16_t)rnd(t);
		break;
	}
	default: /* the rest (flows, WQs, indirection tables): random bodies */
		fill_random(t, b, w->len);
		break;
	}
	return 0;
}

/* Appends random driver data and, sometimes, damages the command. */
static void perturb(struct th *t, struct wcmd *w)
{
	if (chance(t, 12)) {
		w->drv_in = 8 * (1 + rn(t, 8));
		fill_random(t, w->body + w->len, w->drv_in);
	}
	if (chance(t, 20))
		w->drv_out = chance(t, 30) ? 0 : 8 * rn(t, 16);
	if (chance(t, 6) && w->len) { /* flip bytes of the body (not a handle's bookkeeping) */
		int n = 1 + rn(t, 4);

		for (int i = 0; i < n; i++)
			w->body[rn(t, (uint32_t)w->len)] ^= (uint8_t)(1 + rn(t, 255));
	}
	if (chance(t, 4))
		w->resp_len = chance(t, 50) ? w->resp_len / 2 : w->resp_len + 4 * rn(t, 64);
}

/* A raw command's result: counted; 0 or an errno. */
static int result(int kind, long r)
{
	int e = r < 0 ? errno : 0;

	count(kind, e);
	return e;
}

/* Sends w with write(2) in the legacy or extended format. */
static int send_write(struct th *t, struct wcmd *w)
{
	uint8_t *c = t->cmd;
	size_t len;
	int ex = !!(w->cmd & IB_USER_VERBS_CMD_FLAG_EXTENDED);
	struct ib_uverbs_cmd_hdr *h = (void *)c;
	size_t count_bytes;

	if (ex) {
		struct ib_uverbs_ex_cmd_hdr *x = (void *)(c + sizeof(*h));
		size_t body = (w->len + 7) / 8 * 8, drv_in = (w->drv_in + 7) / 8 * 8;

		len = sizeof(*h) + sizeof(*x) + body + drv_in;
		if (len > CMDBUF)
			return -1;
		memset(c, 0, sizeof(*h) + sizeof(*x) + body);
		memcpy(c + sizeof(*h) + sizeof(*x), w->body, w->len + drv_in);
		h->command = w->cmd;
		h->in_words = (uint16_t)(body / 8);
		h->out_words = (uint16_t)((w->resp_len + 7) / 8);
		x->response = (w->resp_len || w->drv_out) ? w->resp : 0;
		x->provider_in_words = (uint16_t)(drv_in / 8);
		x->provider_out_words = (uint16_t)(w->drv_out / 8);
		if (chance(t, 3))
			x->cmd_hdr_reserved = (uint32_t)rnd(t);
		if (chance(t, 3))
			x->response = chance(t, 50) ? 0 : bad_ptr(t);
	} else {
		size_t body = (w->len + 3) / 4 * 4, drv_in = (w->drv_in + 3) / 4 * 4;

		len = sizeof(*h) + body + drv_in;
		if (len > CMDBUF)
			return -1;
		memset(c, 0, sizeof(*h) + body);
		memcpy(c + sizeof(*h), w->body, w->len + drv_in);
		if (w->ci && w->ci->has_resp)
			memcpy(c + sizeof(*h), &w->resp, 8);
		h->command = w->cmd;
		h->in_words = (uint16_t)(len / 4);
		h->out_words = (uint16_t)((w->resp_len + w->drv_out + 3) / 4);
	}
	count_bytes = len;
	switch (chance(t, 10) ? rn(t, 6) : 9) {
	case 0: h->in_words += (uint16_t)(1 + rn(t, 3)); break;
	case 1: h->in_words -= (uint16_t)(1 + rn(t, 3)); break;
	case 2: count_bytes = rn(t, (uint32_t)len); break;
	case 3: h->out_words = (uint16_t)rnd(t); break;
	case 4: h->command ^= 1u << rn(t, 32); break;
	case 5: count_bytes = len + rn(t, PAGE * 2); break; /* reads into the guard page */
	default: break;
	}
	if (t->t->nodestroy)
		h->command = w->cmd; /* a flipped command bit could make it a destroy */
	if (chance(t, 1))
		return result(S_WRITE, write(t->t->fd, (void *)bad_ptr(t), count_bytes));
	return result(S_WRITE, write(t->t->fd, c, count_bytes));
}

/* ------------------------------------------------------------ ioctl */

struct ibuild {
	uint64_t buf[(sizeof(struct ib_uverbs_ioctl_hdr) + 24 * sizeof(struct ib_uverbs_attr)) / 8];
	int n;
};

static struct ib_uverbs_ioctl_hdr *ihdr(struct ibuild *b)
{
	return (struct ib_uverbs_ioctl_hdr *)b->buf;
}

static struct ib_uverbs_attr *iattr(struct ibuild *b, int i)
{
	return &ihdr(b)->attrs[i];
}

static void ib_start(struct ibuild *b, uint16_t obj, uint16_t meth)
{
	memset(b, 0, sizeof(*b));
	ihdr(b)->driver_id = driver_id;
	ihdr(b)->object_id = obj;
	ihdr(b)->method_id = meth;
}

/* an attribute: returns its index */
static int ib_add(struct ibuild *b, uint16_t id, uint16_t len, uint64_t data, uint16_t flags)
{
	struct ib_uverbs_attr *a;

	if (b->n >= 24)
		return b->n - 1;
	a = iattr(b, b->n);
	a->attr_id = id;
	a->len = len;
	a->flags = flags;
	a->data = data;
	return b->n++;
}

/* an input of len bytes (inline when it fits in 8, as rdma-core does) */
static int ib_in(struct th *t, struct ibuild *b, uint16_t id, const void *p, uint16_t len)
{
	uint64_t d = 0;

	if (len <= 8) {
		memcpy(&d, p, len);
		return ib_add(b, id, len, d, UVERBS_ATTR_F_MANDATORY);
	}
	{
		/* the data lives in the thread's input buffer, past the body area */
		static _Thread_local size_t used;
		uint8_t *dst;

		if (len > CMDBUF / 4)
			len = CMDBUF / 4;
		if (used + len > CMDBUF / 2)
			used = 0;
		dst = t->in + CMDBUF / 2 + used;
		used += (len + 7) / 8 * 8;
		memcpy(dst, p, len);
		return ib_add(b, id, len, (uintptr_t)dst, UVERBS_ATTR_F_MANDATORY);
	}
}

static int ib_u64(struct th *t, struct ibuild *b, uint16_t id, uint64_t v, uint16_t len)
{
	return ib_in(t, b, id, &v, len);
}

/* an output: a part of scratch (at `off`), or a bad pointer */
static int ib_out(struct th *t, struct ibuild *b, uint16_t id, size_t off, uint16_t len)
{
	uint64_t p = chance(t, 6) ? bad_ptr(t) : (uintptr_t)t->scratch + off;

	return ib_add(b, id, len, p, UVERBS_ATTR_F_MANDATORY);
}

/* Damages a built ioctl: attributes, lengths, flags, ids, the header. */
static void ib_perturb(struct th *t, struct ibuild *b)
{
	int n = chance(t, 70) ? 0 : 1 + rn(t, 3);

	for (int k = 0; k < n && b->n; k++) {
		struct ib_uverbs_attr *a = iattr(b, rn(t, b->n));

		switch (rn(t, 10)) {
		case 0: a->len = (uint16_t)rnd(t); break;
		case 1: a->len = (uint16_t)(a->len ? a->len - 1 : 9); break;
		case 2: a->flags = (uint16_t)rnd(t); break;
		case 3: a->attr_id = (uint16_t)rn(t, 20); break;
		case 4: a->attr_id = (uint16_t)(UVERBS_ATTR_UHW_IN + rn(t, 3)); break;
		case 5: a->data = chance(t, 50) ? bad_ptr(t) : rnd(t); break;
		case 6: a->attr_data.reserved = (uint16_t)rnd(t); break;
		case 7: /* a duplicate */
			if (b->n < 24) {
				*iattr(b, b->n) = *a;
				b->n++;
			}
			break;
		case 8: /* drop the last */
			b->n--;
			break;
		default: a->flags ^= UVERBS_ATTR_F_MANDATORY; break;
		}
	}
	if (chance(t, 3))
		ihdr(b)->driver_id = (uint32_t)rn(t, 32);
	if (chance(t, 2))
		ihdr(b)->reserved1 = rnd(t);
	if (chance(t, 2))
		ihdr(b)->reserved2 = (uint32_t)rnd(t);
}

static int ib_send(struct th *t, struct ibuild *b)
{
	struct ib_uverbs_ioctl_hdr *h = ihdr(b);

	h->num_attrs = (uint16_t)b->n;
	h->length = (uint16_t)(sizeof(*h) + b->n * sizeof(struct ib_uverbs_attr));
	if (chance(t, 3))
		h->length = (uint16_t)(chance(t, 50) ? h->length + 16 * rn(t, 4) - 8 : rnd(t));
	if (chance(t, 2))
		h->num_attrs = (uint16_t)(chance(t, 50) ? b->n + 1 + rn(t, 3) : rnd(t));
	if (chance(t, 1))
		return result(S_IOCTL, ioctl(t->t->fd, RDMA_VERBS_IOCTL, (void *)bad_ptr(t)));
	if (chance(t, 1)) /* another ioctl number on the same file */
		return result(S_IOCTL, ioctl(t->t->fd, _IOWR(RDMA_IOCTL_MAGIC, rn(t, 4), struct ib_uverbs_ioctl_hdr), h));
	return result(S_IOCTL, ioctl(t->t->fd, RDMA_VERBS_IOCTL, h));
}

/* w sent through INVOKE_WRITE (how libibverbs sends legacy commands). */
static int send_invoke(struct th *t, struct wcmd *w)
{
	struct ibuild b;
	uint32_t cmd = w->cmd;
	size_t in_len = w->len;

	/* the legacy body's response field is not part of what the ioctl reads */
	ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_INVOKE_WRITE);
	ib_u64(t, &b, UVERBS_ATTR_WRITE_CMD, cmd, 8);
	if (in_len)
		ib_in(t, &b, UVERBS_ATTR_CORE_IN, w->body, (uint16_t)in_len);
	if (w->resp_len)
		ib_add(&b, UVERBS_ATTR_CORE_OUT, (uint16_t)w->resp_len, w->resp, UVERBS_ATTR_F_MANDATORY);
	if (w->drv_in)
		ib_in(t, &b, UVERBS_ATTR_UHW_IN, w->body + w->len, (uint16_t)w->drv_in);
	if (w->drv_out)
		ib_add(&b, UVERBS_ATTR_UHW_OUT, (uint16_t)w->drv_out,
		       w->resp == (uintptr_t)t->scratch ? w->resp + w->resp_len : bad_ptr(t), UVERBS_ATTR_F_MANDATORY);
	if (!t->t->nodestroy)
		ib_perturb(t, &b);
	return ib_send(t, &b);
}

/* ------------------------------------------------------------ bookkeeping */

/* After a command that succeeded: what it made or destroyed. */
static void account(struct th *t, const struct wcmd *w, int err)
{
	struct target *tg = t->t;
	const struct cmdinfo *ci = w->ci;
	const uint8_t *r = t->scratch;
	struct obj o;

	if (err || !ci)
		return;
	if (ci->destroys) {
		pthread_mutex_lock(&tg->lock);
		pool_del(tg, ci->destroys - 1, w->h);
		pthread_mutex_unlock(&tg->lock);
		return;
	}
	if (w->resp != (uintptr_t)t->scratch)
		return; /* the answer is not where we can read it */
	memset(&o, 0, sizeof(o));
	o.qp_type = w->qp_type;
	if (w->cmd == IB_USER_VERBS_CMD_RESIZE_CQ) {
		pthread_mutex_lock(&tg->lock);
		for (int i = 0; i < tg->n; i++) {
			struct obj *c = &tg->o[i];

			if (c->type == OT_CQ && c->h == w->h && w->drv_out >= 16) {
				retire_maps(tg, c);
				pthread_mutex_unlock(&tg->lock);
				parse_maps(t, &o, r + w->resp_len, w->drv_out, 1);
				pthread_mutex_lock(&tg->lock);
				for (int j = 0; j < tg->n; j++)
					if (tg->o[j].type == OT_CQ && tg->o[j].h == w->h && !tg->o[j].m[0].addr) {
						tg->o[j].m[0] = o.m[0];
						o.m[0].addr = NULL;
						break;
					}
				unmap_rmap(&o.m[0]);
				break;
			}
		}
		pthread_mutex_unlock(&tg->lock);
		return;
	}
	if (!ci->creates)
		return;
	o.type = ci->creates - 1;
	memcpy(&o.h, r, 4);
	switch (o.type) {
	case OT_CHAN:
		if (!new_event_fd((int)o.h, tg->async_fd))
			return;
		fcntl((int)o.h, F_SETFL, O_NONBLOCK);
		break;
	case OT_MR:
		memcpy(&o.num, r + 4, 4);
		memcpy(&o.rkey, r + 8, 4);
		break;
	case OT_CQ:
		parse_maps(t, &o, r + w->resp_len, w->drv_out, 1);
		break;
	case OT_QP:
		memcpy(&o.num, r + 4, 4);
		parse_maps(t, &o, r + w->resp_len, w->drv_out, 2);
		break;
	case OT_SRQ:
		memcpy(&o.num, r + 12, 4);
		parse_maps(t, &o, r + w->resp_len, w->drv_out, 1);
		break;
	default:
		break;
	}
	pthread_mutex_lock(&tg->lock);
	pool_add(tg, &o);
	pthread_mutex_unlock(&tg->lock);
}

/* Destroys one object of `type` with a raw command (the pool is full). */
static void raw_destroy_one(struct th *t, int type);

static const uint32_t create_cmds[] = {
	IB_USER_VERBS_CMD_ALLOC_PD, IB_USER_VERBS_CMD_CREATE_AH, IB_USER_VERBS_CMD_REG_MR,
	IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, IB_USER_VERBS_CMD_CREATE_CQ, IB_USER_VERBS_CMD_CREATE_QP,
	IB_USER_VERBS_CMD_CREATE_SRQ, IB_USER_VERBS_CMD_CREATE_XSRQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_CQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_QP,
};
static const uint32_t use_cmds[] = {
	IB_USER_VERBS_CMD_QUERY_DEVICE, IB_USER_VERBS_CMD_QUERY_PORT, IB_USER_VERBS_CMD_REREG_MR,
	IB_USER_VERBS_CMD_ALLOC_MW, IB_USER_VERBS_CMD_DEALLOC_MW, IB_USER_VERBS_CMD_RESIZE_CQ,
	IB_USER_VERBS_CMD_POLL_CQ, IB_USER_VERBS_CMD_PEEK_CQ, IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
	IB_USER_VERBS_CMD_QUERY_QP, IB_USER_VERBS_CMD_MODIFY_QP, IB_USER_VERBS_CMD_MODIFY_QP,
	IB_USER_VERBS_CMD_MODIFY_QP, IB_USER_VERBS_CMD_POST_SEND, IB_USER_VERBS_CMD_POST_SEND,
	IB_USER_VERBS_CMD_POST_RECV, IB_USER_VERBS_CMD_ATTACH_MCAST, IB_USER_VERBS_CMD_DETACH_MCAST,
	IB_USER_VERBS_CMD_MODIFY_SRQ, IB_USER_VERBS_CMD_QUERY_SRQ, IB_USER_VERBS_CMD_POST_SRQ_RECV,
	IB_USER_VERBS_CMD_OPEN_XRCD, IB_USER_VERBS_CMD_CLOSE_XRCD, IB_USER_VERBS_CMD_OPEN_QP,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_QP,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_CQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_FLOW,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_DESTROY_FLOW,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_WQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_MODIFY_WQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_DESTROY_WQ,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL,
	IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL,
};
static const uint32_t destroy_cmds[] = {
	IB_USER_VERBS_CMD_DEALLOC_PD, IB_USER_VERBS_CMD_DESTROY_AH, IB_USER_VERBS_CMD_DEREG_MR,
	IB_USER_VERBS_CMD_DESTROY_CQ, IB_USER_VERBS_CMD_DESTROY_QP, IB_USER_VERBS_CMD_DESTROY_SRQ,
};
#define N(a) (sizeof(a) / sizeof((a)[0]))

static const uint32_t destroy_of[OT_NTYPES] = {
	[OT_PD] = IB_USER_VERBS_CMD_DEALLOC_PD, [OT_CQ] = IB_USER_VERBS_CMD_DESTROY_CQ,
	[OT_QP] = IB_USER_VERBS_CMD_DESTROY_QP, [OT_SRQ] = IB_USER_VERBS_CMD_DESTROY_SRQ,
	[OT_AH] = IB_USER_VERBS_CMD_DESTROY_AH, [OT_MR] = IB_USER_VERBS_CMD_DEREG_MR,
};

/* Builds, perturbs and sends one legacy/extended command by write or ioctl. */
static int one_cmd(struct th *t, uint32_t cmd, int gentle)
{
	struct wcmd w;
	int e, via_ioctl;

	if (build(t, &w, cmd))
		return -1;
	if (w.ci && w.ci->creates && pool_count(t->t, w.ci->creates - 1) >= cap_of[w.ci->creates - 1])
		raw_destroy_one(t, w.ci->creates - 1);
	if (!gentle)
		perturb(t, &w);
	if (w.ci && w.ci->destroys) /* the handle as sent, bytes flipped or not */
		memcpy(&w.h, w.body + (w.ci->has_resp ? 8 : 0), 4);
	via_ioctl = chance(t, 50);
	e = via_ioctl ? send_invoke(t, &w) : send_write(t, &w);
	account(t, &w, e);
	return e;
}

static void raw_destroy_one(struct th *t, int type)
{
	struct target *tg = t->t;
	struct obj *o;
	uint32_t h;
	struct wcmd w;
	int e;

	if (tg->nodestroy)
		return;
	pthread_mutex_lock(&tg->lock);
	o = pool_pick(t, type);
	if (!o) {
		pthread_mutex_unlock(&tg->lock);
		return;
	}
	h = o->h;
	if (type == OT_CHAN || type == OT_ASYNC) { /* an fd: closed */
		pool_del(tg, type, h);
		close((int)h);
		atomic_fetch_add(&st_closes, 1);
		pthread_mutex_unlock(&tg->lock);
		return;
	}
	pthread_mutex_unlock(&tg->lock);
	build(t, &w, destroy_of[type]);
	memcpy(w.body + (w.ci->has_resp ? 8 : 0), &h, 4);
	w.h = h;
	e = chance(t, 50) ? send_invoke(t, &w) : send_write(t, &w);
	account(t, &w, e);
	if (e == ENOENT || e == EINVAL) { /* someone else got there first: forget it */
		pthread_mutex_lock(&tg->lock);
		pool_del(tg, type, h);
		pthread_mutex_unlock(&tg->lock);
	}
}

/* ------------------------------------------------------------ native ioctl methods */

/* The handle attribute (IDR NEW) index of a create, for its answer. */
static void native_account(struct th *t, struct ibuild *b, int hidx, int type, int err, int qpn_off,
			   size_t uhw_off, int nmaps, int qpt)
{
	struct obj o;

	if (err || hidx < 0 || hidx >= b->n)
		return;
	memset(&o, 0, sizeof(o));
	o.type = type;
	o.h = (uint32_t)iattr(b, hidx)->data;
	o.qp_type = qpt;
	if (type == OT_ASYNC || type == OT_CHAN) {
		if (!new_event_fd((int)o.h, t->t->async_fd))
			return;
		fcntl((int)o.h, F_SETFL, O_NONBLOCK);
	}
	if (qpn_off >= 0)
		memcpy(&o.num, t->scratch + qpn_off, 4);
	if (nmaps)
		parse_maps(t, &o, t->scratch + uhw_off, 32, nmaps);
	pthread_mutex_lock(&t->t->lock);
	pool_add(t->t, &o);
	pthread_mutex_unlock(&t->t->lock);
}

/* An fd of the async event files made here (EVENT_FD attributes). */
static int pick_async(struct th *t)
{
	struct obj *o;
	int fd = -1;

	pthread_mutex_lock(&t->t->lock);
	if (chance(t, 60) && (o = pool_pick(t, OT_ASYNC)))
		fd = (int)o->h;
	else if (chance(t, 30))
		fd = t->t->async_fd;
	else if (chance(t, 50))
		fd = (int)rn(t, 64);
	pthread_mutex_unlock(&t->t->lock);
	return is_protected(fd) ? -1 : fd;
}

static int one_native(struct th *t)
{
	struct ibuild b;
	int c = rn(t, t->t->nodestroy ? 8 : 20), hidx = -1, e;
	struct target *tg = t->t;
	uint32_t h;

	switch (c) {
	case 0: /* QUERY_PORT */
		ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_PORT);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_PORT_PORT_NUM, chance(t, 85) ? 1 : rn(t, 256), 1);
		ib_out(t, &b, UVERBS_ATTR_QUERY_PORT_RESP, 0, sizeof(struct ib_uverbs_query_port_resp_ex));
		break;
	case 1: /* QUERY_CONTEXT */
		ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT);
		ib_out(t, &b, UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, 8, 8);
		break;
	case 2: { /* QUERY_GID_TABLE */
		uint32_t n = chance(t, 80) ? 1 + rn(t, 32) : rn(t, 4096);

		ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_GID_TABLE);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
		       chance(t, 85) ? sizeof(struct ib_uverbs_gid_entry) : rn(t, 64), 8);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_GID_TABLE_FLAGS, chance(t, 85) ? 0 : rnd(t), 4);
		ib_out(t, &b, UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES, 64,
		       (uint16_t)(n * sizeof(struct ib_uverbs_gid_entry)));
		ib_out(t, &b, UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, 0, 8);
		break;
	}
	case 3: /* QUERY_GID_ENTRY */
		ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_GID_ENTRY);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_GID_ENTRY_PORT, chance(t, 85) ? 1 : rnd(t), 4);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX, chance(t, 70) ? rn(t, 8) : rnd(t), 4);
		ib_u64(t, &b, UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS, chance(t, 85) ? 0 : rnd(t), 4);
		ib_out(t, &b, UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY, 0, sizeof(struct ib_uverbs_gid_entry));
		break;
	case 4: /* INFO_HANDLES */
		ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_INFO_HANDLES);
		ib_u64(t, &b, UVERBS_ATTR_INFO_OBJECT_ID, chance(t, 85) ? rn(t, 19) : rnd(t), 2);
		ib_out(t, &b, UVERBS_ATTR_INFO_TOTAL_HANDLES, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_INFO_HANDLES_LIST, 64, (uint16_t)(4 * rn(t, 300)));
		break;
	case 5: /* QUERY_MR */
		ib_start(&b, UVERBS_OBJECT_MR, UVERBS_METHOD_QUERY_MR);
		ib_add(&b, UVERBS_ATTR_QUERY_MR_HANDLE, 0, pick_handle(t, OT_MR), UVERBS_ATTR_F_MANDATORY);
		ib_out(t, &b, UVERBS_ATTR_QUERY_MR_RESP_LKEY, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_QUERY_MR_RESP_RKEY, 8, 4);
		ib_out(t, &b, UVERBS_ATTR_QUERY_MR_RESP_LENGTH, 16, 8);
		ib_out(t, &b, UVERBS_ATTR_QUERY_MR_RESP_IOVA, 24, 8);
		break;
	case 6: /* QUERY_PORT_SPEED, GET_CONTEXT (again) */
		if (chance(t, 50)) {
			ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_PORT_SPEED);
			ib_u64(t, &b, UVERBS_ATTR_QUERY_PORT_SPEED_PORT_NUM, chance(t, 85) ? 1 : rnd(t), 4);
			ib_out(t, &b, UVERBS_ATTR_QUERY_PORT_SPEED_RESP, 0, 8);
		} else if (ioctl_get_context_again) {
			ib_start(&b, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT);
			ib_out(t, &b, UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS, 0, 4);
			ib_out(t, &b, UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT, 8, 8);
		} else { /* by write() (see ioctl_get_context_again) */
			static const struct cmdinfo gc = { "get_context", 8, 8, 8, 0, 1, 0, 0, 0 };
			struct wcmd w;
			uint32_t afd;

			memset(&w, 0, sizeof(w));
			w.cmd = IB_USER_VERBS_CMD_GET_CONTEXT;
			w.ci = &gc;
			w.body = t->in;
			memset(w.body, 0, 64);
			w.len = sizeof(struct ib_uverbs_get_context);
			w.resp_len = sizeof(struct ib_uverbs_get_context_resp);
			w.drv_out = 8;
			w.resp = chance(t, 90) ? (uintptr_t)t->scratch : bad_ptr(t);
			e = send_write(t, &w);
			/* accepted (a file with no context yet): its async event
			 * file is not ours to keep, as with the ioctl */
			if (!e && w.resp == (uintptr_t)t->scratch) {
				memcpy(&afd, t->scratch, 4);
				if (new_event_fd((int)afd, tg->async_fd))
					close((int)afd);
			}
			return e;
		}
		break;
	case 7: { /* anything at all: an object, a method, attributes */
		int n = rn(t, 8);

		ib_start(&b, (uint16_t)(chance(t, 85) ? rn(t, 20) : rnd(t)), (uint16_t)(chance(t, 85) ? rn(t, 10) : rnd(t)));
		if (t->t->nodestroy) /* a method 1 of many objects destroys */
			ihdr(&b)->method_id = 0, ihdr(&b)->object_id = UVERBS_OBJECT_DEVICE + 20;
		if (!ioctl_get_context_again && ihdr(&b)->object_id == UVERBS_OBJECT_DEVICE &&
		    ihdr(&b)->method_id == UVERBS_METHOD_GET_CONTEXT) /* (see ioctl_get_context_again) */
			ihdr(&b)->method_id = UVERBS_METHOD_QUERY_CONTEXT;
		for (int i = 0; i < n; i++)
			ib_add(&b, (uint16_t)(chance(t, 80) ? rn(t, 16) : rnd(t)), (uint16_t)rn(t, 64),
			       chance(t, 50) ? (uintptr_t)t->scratch : rnd(t), (uint16_t)rn(t, 4));
		break;
	}
	case 8: case 9: { /* CQ_CREATE */
		uint32_t cqe = qty(t, (uint32_t)dev_attr.max_cqe);
		int ch = pick_chan(t), ev = pick_async(t);

		if (pool_count(tg, OT_CQ) >= cap_of[OT_CQ])
			raw_destroy_one(t, OT_CQ);
		ib_start(&b, UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_CREATE);
		hidx = ib_add(&b, UVERBS_ATTR_CREATE_CQ_HANDLE, 0, 0, UVERBS_ATTR_F_MANDATORY);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_CQ_CQE, cqe, 4);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_CQ_USER_HANDLE, rnd(t), 8);
		if (ch >= 0 || chance(t, 10))
			ib_add(&b, UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, 0, (uint64_t)(int64_t)ch, UVERBS_ATTR_F_MANDATORY);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, chance(t, 85) ? 0 : rnd(t), 4);
		if (chance(t, 30))
			ib_u64(t, &b, UVERBS_ATTR_CREATE_CQ_FLAGS, rn(t, 8), 4);
		ib_out(t, &b, UVERBS_ATTR_CREATE_CQ_RESP_CQE, 0, 4);
		if (ev >= 0 && chance(t, 40))
			ib_add(&b, UVERBS_ATTR_CREATE_CQ_EVENT_FD, 0, (uint64_t)(int64_t)ev, UVERBS_ATTR_F_MANDATORY);
		if (chance(t, 5))
			ib_u64(t, &b, UVERBS_ATTR_CREATE_CQ_BUFFER_VA, (uintptr_t)tg->mrbuf, 8);
		ib_out(t, &b, UVERBS_ATTR_UHW_OUT, 64, chance(t, 85) ? 16 : (uint16_t)rn(t, 64));
		ib_perturb(t, &b);
		e = ib_send(t, &b);
		native_account(t, &b, hidx, OT_CQ, e, -1, 64, 1, -1);
		return e;
	}
	case 10: case 11: { /* QP_CREATE */
		struct ib_uverbs_qp_cap cap = {
			qty(t, (uint32_t)dev_attr.max_qp_wr), qty(t, (uint32_t)dev_attr.max_qp_wr),
			chance(t, 80) ? 1 + rn(t, 4) : qty(t, 8), chance(t, 80) ? 1 + rn(t, 4) : qty(t, 8),
			chance(t, 70) ? rn(t, 65) : qty(t, 64),
		};
		int qpt = pick_qp_type(t), ev = pick_async(t);
		uint32_t cq = pick_handle(t, OT_CQ);

		if (pool_count(tg, OT_QP) >= cap_of[OT_QP])
			raw_destroy_one(t, OT_QP);
		ib_start(&b, UVERBS_OBJECT_QP, UVERBS_METHOD_QP_CREATE);
		hidx = ib_add(&b, UVERBS_ATTR_CREATE_QP_HANDLE, 0, 0, UVERBS_ATTR_F_MANDATORY);
		ib_add(&b, UVERBS_ATTR_CREATE_QP_PD_HANDLE, 0, pick_handle(t, OT_PD), UVERBS_ATTR_F_MANDATORY);
		ib_add(&b, UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, 0, cq, UVERBS_ATTR_F_MANDATORY);
		ib_add(&b, UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, 0, chance(t, 60) ? cq : pick_handle(t, OT_CQ),
		       UVERBS_ATTR_F_MANDATORY);
		if (chance(t, 20))
			ib_add(&b, UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, 0, pick_handle(t, OT_SRQ), UVERBS_ATTR_F_MANDATORY);
		if (chance(t, 4))
			ib_add(&b, UVERBS_ATTR_CREATE_QP_XRCD_HANDLE, 0, pick_handle(t, OT_PD), UVERBS_ATTR_F_MANDATORY);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_QP_USER_HANDLE, rnd(t), 8);
		ib_in(t, &b, UVERBS_ATTR_CREATE_QP_CAP, &cap, sizeof(cap));
		ib_u64(t, &b, UVERBS_ATTR_CREATE_QP_TYPE, (uint64_t)qpt, 8);
		if (chance(t, 20))
			ib_u64(t, &b, UVERBS_ATTR_CREATE_QP_FLAGS, rnd(t) & 0x3ff, 4);
		if (chance(t, 5))
			ib_u64(t, &b, UVERBS_ATTR_CREATE_QP_SOURCE_QPN, pick_qpn(t), 4);
		if (ev >= 0 && chance(t, 40))
			ib_add(&b, UVERBS_ATTR_CREATE_QP_EVENT_FD, 0, (uint64_t)(int64_t)ev, UVERBS_ATTR_F_MANDATORY);
		ib_out(t, &b, UVERBS_ATTR_CREATE_QP_RESP_CAP, 32, sizeof(struct ib_uverbs_qp_cap));
		ib_out(t, &b, UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_UHW_OUT, 64, chance(t, 85) ? 40 : (uint16_t)rn(t, 64));
		ib_perturb(t, &b);
		e = ib_send(t, &b);
		native_account(t, &b, hidx, OT_QP, e, 0, 64, 2, qpt);
		return e;
	}
	case 12: { /* SRQ_CREATE */
		int ev = pick_async(t);

		if (pool_count(tg, OT_SRQ) >= cap_of[OT_SRQ])
			raw_destroy_one(t, OT_SRQ);
		ib_start(&b, UVERBS_OBJECT_SRQ, UVERBS_METHOD_SRQ_CREATE);
		hidx = ib_add(&b, UVERBS_ATTR_CREATE_SRQ_HANDLE, 0, 0, UVERBS_ATTR_F_MANDATORY);
		ib_add(&b, UVERBS_ATTR_CREATE_SRQ_PD_HANDLE, 0, pick_handle(t, OT_PD), UVERBS_ATTR_F_MANDATORY);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_SRQ_USER_HANDLE, rnd(t), 8);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_SRQ_MAX_WR, qty(t, (uint32_t)dev_attr.max_srq_wr), 4);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_SRQ_MAX_SGE, chance(t, 80) ? 1 + rn(t, 4) : qty(t, 8), 4);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_SRQ_LIMIT, rn(t, 16), 4);
		ib_u64(t, &b, UVERBS_ATTR_CREATE_SRQ_TYPE, chance(t, 80) ? 0 : rn(t, 4), 8);
		if (chance(t, 10))
			ib_add(&b, UVERBS_ATTR_CREATE_SRQ_CQ_HANDLE, 0, pick_handle(t, OT_CQ), UVERBS_ATTR_F_MANDATORY);
		if (ev >= 0 && chance(t, 40))
			ib_add(&b, UVERBS_ATTR_CREATE_SRQ_EVENT_FD, 0, (uint64_t)(int64_t)ev, UVERBS_ATTR_F_MANDATORY);
		ib_out(t, &b, UVERBS_ATTR_CREATE_SRQ_RESP_MAX_WR, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_CREATE_SRQ_RESP_MAX_SGE, 8, 4);
		ib_out(t, &b, UVERBS_ATTR_CREATE_SRQ_RESP_SRQ_NUM, 16, 4);
		ib_out(t, &b, UVERBS_ATTR_UHW_OUT, 64, chance(t, 85) ? 24 : (uint16_t)rn(t, 64));
		ib_perturb(t, &b);
		e = ib_send(t, &b);
		native_account(t, &b, hidx, OT_SRQ, e, 16, 64, 1, -1);
		return e;
	}
	case 13: { /* REG_MR (the native method) */
		__u64 st, ln;

		if (pool_count(tg, OT_MR) >= cap_of[OT_MR])
			raw_destroy_one(t, OT_MR);
		mr_range(t, &st, &ln);
		ib_start(&b, UVERBS_OBJECT_MR, UVERBS_METHOD_REG_MR);
		hidx = ib_add(&b, UVERBS_ATTR_REG_MR_HANDLE, 0, 0, UVERBS_ATTR_F_MANDATORY);
		ib_add(&b, UVERBS_ATTR_REG_MR_PD_HANDLE, 0, pick_handle(t, OT_PD), UVERBS_ATTR_F_MANDATORY);
		ib_u64(t, &b, UVERBS_ATTR_REG_MR_IOVA, chance(t, 80) ? st : rnd(t), 8);
		ib_u64(t, &b, UVERBS_ATTR_REG_MR_ADDR, st, 8);
		ib_u64(t, &b, UVERBS_ATTR_REG_MR_LENGTH, ln, 8);
		ib_u64(t, &b, UVERBS_ATTR_REG_MR_ACCESS_FLAGS, access_flags(t), 4);
		if (chance(t, 10))
			ib_add(&b, UVERBS_ATTR_REG_MR_FD, 0, rn(t, 64), UVERBS_ATTR_F_MANDATORY);
		ib_out(t, &b, UVERBS_ATTR_REG_MR_RESP_LKEY, 0, 4);
		ib_out(t, &b, UVERBS_ATTR_REG_MR_RESP_RKEY, 8, 4);
		ib_perturb(t, &b);
		e = ib_send(t, &b);
		native_account(t, &b, hidx, OT_MR, e, 0, 0, 0, -1);
		return e;
	}
	case 14: /* ASYNC_EVENT_ALLOC: a new async event file */
		if (pool_count(tg, OT_ASYNC) >= cap_of[OT_ASYNC])
			raw_destroy_one(t, OT_ASYNC);
		ib_start(&b, UVERBS_OBJECT_ASYNC_EVENT, UVERBS_METHOD_ASYNC_EVENT_ALLOC);
		hidx = ib_add(&b, UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE, 0, 0, UVERBS_ATTR_F_MANDATORY);
		if (chance(t, 10))
			ib_perturb(t, &b);
		e = ib_send(t, &b);
		native_account(t, &b, hidx, OT_ASYNC, e, -1, 0, 0, -1);
		return e;
	default: { /* the destroy methods, with the handles they get */
		static const struct {
			uint16_t obj, meth, attr;
			int type;
			uint16_t resp_attr, resp_len;
		} d[] = {
			{ UVERBS_OBJECT_PD, UVERBS_METHOD_PD_DESTROY, UVERBS_ATTR_DESTROY_PD_HANDLE, OT_PD, 0, 0 },
			{ UVERBS_OBJECT_CQ, UVERBS_METHOD_CQ_DESTROY, UVERBS_ATTR_DESTROY_CQ_HANDLE, OT_CQ,
			  UVERBS_ATTR_DESTROY_CQ_RESP, sizeof(struct ib_uverbs_destroy_cq_resp) },
			{ UVERBS_OBJECT_QP, UVERBS_METHOD_QP_DESTROY, UVERBS_ATTR_DESTROY_QP_HANDLE, OT_QP,
			  UVERBS_ATTR_DESTROY_QP_RESP, sizeof(struct ib_uverbs_destroy_qp_resp) },
			{ UVERBS_OBJECT_SRQ, UVERBS_METHOD_SRQ_DESTROY, UVERBS_ATTR_DESTROY_SRQ_HANDLE, OT_SRQ,
			  UVERBS_ATTR_DESTROY_SRQ_RESP, sizeof(struct ib_uverbs_destroy_srq_resp) },
			{ UVERBS_OBJECT_AH, UVERBS_METHOD_AH_DESTROY, UVERBS_ATTR_DESTROY_AH_HANDLE, OT_AH, 0, 0 },
			{ UVERBS_OBJECT_MR, UVERBS_METHOD_MR_DESTROY, UVERBS_ATTR_DESTROY_MR_HANDLE, OT_MR, 0, 0 },
		};
		int k = rn(t, N(d));

		h = pick_handle(t, d[k].type);
		ib_start(&b, d[k].obj, d[k].meth);
		ib_add(&b, d[k].attr, 0, h, UVERBS_ATTR_F_MANDATORY);
		if (d[k].resp_len)
			ib_out(t, &b, d[k].resp_attr, 0, d[k].resp_len);
		if (chance(t, 30))
			ib_perturb(t, &b);
		e = ib_send(t, &b);
		if (!e || e == ENOENT) {
			pthread_mutex_lock(&tg->lock);
			pool_del(tg, d[k].type, h);
			pthread_mutex_unlock(&tg->lock);
		}
		if (!e && chance(t, 30)) /* and once more: a double destroy */
			ib_send(t, &b);
		return e;
	}
	}
	if (!t->t->nodestroy)
		ib_perturb(t, &b);
	return ib_send(t, &b);
}

/* ------------------------------------------------------------ rings, maps, events */

/* Random bytes into a raw object's rings (under the lock: nobody unmaps them
 * meanwhile), then its doorbells. */
static void ring_scribble(struct th *t)
{
	struct target *tg = t->t;
	struct obj *o;
	uint32_t h = 0;
	int is_qp = 0;

	if (tg->no_ring_touch)
		return;
	pthread_mutex_lock(&tg->lock);
	if (tg->ndead && chance(t, 15)) { /* the ring of an object destroyed meanwhile */
		struct rmap *m = &tg->dead[rn(t, tg->ndead)];

		if (m->addr && m->len) {
			fill_random(t, m->addr + rn(t, m->len), 1);
			atomic_fetch_add(&st_ring_writes, 1);
		}
	}
	o = pool_pick(t, chance(t, 60) ? OT_QP : chance(t, 50) ? OT_CQ : OT_SRQ);
	if (o) {
		for (int k = 0; k < 2; k++) {
			struct rmap *m = &o->m[k];

			if (!m->addr || !m->len)
				continue;
			if (chance(t, 50)) { /* an index: the first words of the header */
				uint32_t v = chance(t, 50) ? (uint32_t)rnd(t) : rn(t, 300);

				memcpy(m->addr + 4 * rn(t, 2) * 16, &v, 4);
			} else {
				size_t off = rn(t, m->len), len = 1 + rn(t, 64);

				if (off + len > m->len)
					len = m->len - off;
				fill_random(t, m->addr + off, len);
			}
			atomic_fetch_add(&st_ring_writes, 1);
		}
		h = o->h;
		is_qp = o->type == OT_QP;
	}
	pthread_mutex_unlock(&tg->lock);
	if (is_qp) { /* the doorbells: empty post_send and post_recv */
		struct wcmd w;

		for (int k = 0; k < 2; k++) {
			struct ib_uverbs_post_send *p;

			build(t, &w, k ? IB_USER_VERBS_CMD_POST_RECV : IB_USER_VERBS_CMD_POST_SEND);
			p = (void *)w.body;
			p->qp_handle = h;
			p->wr_count = p->sge_count = 0;
			p->wqe_size = k ? sizeof(struct ib_uverbs_recv_wr) : sizeof(struct ib_uverbs_send_wr);
			w.len = sizeof(*p);
			w.resp = (uintptr_t)t->scratch;
			if (chance(t, 50))
				send_write(t, &w);
			else
				send_invoke(t, &w);
		}
	}
}

/* mmap of random and known offsets of the file: lengths, protections, flags;
 * what maps is read (and written where the file is ours), then unmapped. */
static void mmap_fuzz(struct th *t)
{
	struct target *tg = t->t;
	uint64_t off;
	size_t len;
	int prot, flags;
	uint8_t *p;
	struct obj *o;
	int c = rn(t, 100);

	if (tg->no_ring_touch) /* (the close phase unmaps every uverbs map) */
		return;
	pthread_mutex_lock(&tg->lock);
	o = pool_pick(t, chance(t, 50) ? OT_QP : OT_CQ);
	if (c < 40 && o && o->m[0].len) {
		off = o->m[0].off;
		len = o->m[0].len;
	} else if (c < 50 && tg->ndead) {
		off = tg->dead[rn(t, tg->ndead)].off; /* a destroyed object's ring */
		len = PAGE;
	} else {
		off = chance(t, 60) ? (uint64_t)rn(t, 64) * PAGE : rnd(t) & ~(uint64_t)(PAGE - 1);
		len = PAGE;
	}
	pthread_mutex_unlock(&tg->lock);
	if (chance(t, 30))
		len = chance(t, 50) ? len + PAGE * (1 + rn(t, 4)) : (size_t)PAGE * (1 + rn(t, 8));
	if (chance(t, 5))
		off += 1 + rn(t, PAGE - 1);
	prot = chance(t, 80) ? PROT_READ | PROT_WRITE : (int)rn(t, 8);
	flags = chance(t, 90) ? MAP_SHARED : MAP_PRIVATE;
	p = mmap(NULL, len, prot, flags, tg->fd, (off_t)off);
	count(S_MMAP, p == MAP_FAILED ? errno : 0);
	if (p == MAP_FAILED)
		return;
	if (prot & PROT_READ) {
		volatile uint8_t sum = 0;

		for (size_t i = 0; i < len; i += 64)
			sum += p[i];
		(void)sum;
	}
	if ((prot & PROT_WRITE) && flags == MAP_SHARED && !tg->nodestroy && chance(t, 50))
		fill_random(t, p + rn(t, (uint32_t)len), 1);
	/*
	 * Then unmapped: only what is still this thread's. A range that spans
	 * a hole made here would also unmap whatever another thread mapped
	 * into the hole meanwhile (a ring it then writes to: SIGSEGV).
	 */
	switch (rn(t, 6)) {
	case 0: /* grow it (VM_DONTEXPAND: refused; grown, the page is ours) */
		if (mremap(p, len, len + PAGE, 0) == MAP_FAILED) {
			count(S_MMAP, errno);
		} else {
			count(S_MMAP, 0);
			len += PAGE;
		}
		break;
	case 1:
		count(S_MMAP, mprotect(p, len, PROT_READ | PROT_EXEC) ? errno : 0);
		break;
	case 2:
		count(S_MMAP, madvise(p, len, chance(t, 50) ? MADV_DONTFORK : MADV_DONTNEED) ? errno : 0);
		break;
	case 3: /* unmap its second page first, then the pages around it */
		if (len > PAGE) {
			count(S_MMAP, munmap(p + PAGE, PAGE) ? errno : 0);
			if (len > 2 * PAGE)
				count(S_MMAP, munmap(p + 2 * PAGE, len - 2 * PAGE) ? errno : 0);
			len = PAGE;
		}
		break;
	default:
		break;
	}
	count(S_MMAP, munmap(p, len) ? errno : 0);
}

/* Reads completion channels and async event files (non-blocking, under
 * the lock so that the fd is still ours), closes one now and then. */
static void event_fuzz(struct th *t)
{
	struct target *tg = t->t;
	struct obj *o;
	uint8_t buf[256];
	int type = chance(t, 60) ? OT_CHAN : OT_ASYNC;

	pthread_mutex_lock(&tg->lock);
	o = pool_pick(t, type);
	if (!o && type == OT_ASYNC && tg->async_fd >= 0) {
		size_t len = chance(t, 80) ? sizeof(struct ib_uverbs_async_event_desc) : rn(t, sizeof(buf));

		fcntl(tg->async_fd, F_SETFL, O_NONBLOCK);
		if (read(tg->async_fd, buf, len) > 0)
			atomic_fetch_add(&st_events, 1);
	} else if (o) {
		size_t len = chance(t, 80) ? (type == OT_CHAN ? sizeof(struct ib_uverbs_comp_event_desc)
							 : sizeof(struct ib_uverbs_async_event_desc))
					   : rn(t, sizeof(buf));
		struct pollfd pf = { (int)o->h, POLLIN, 0 };

		poll(&pf, 1, 0);
		fcntl((int)o->h, F_SETFL, O_NONBLOCK);
		if (read((int)o->h, chance(t, 3) ? (void *)guard_page : buf, len) > 0)
			atomic_fetch_add(&st_events, 1);
		if (chance(t, 4)) { /* close it with CQs still bound to it */
			uint32_t fd = o->h;

			pool_del(tg, type, fd);
			close((int)fd);
			atomic_fetch_add(&st_closes, 1);
		}
	}
	pthread_mutex_unlock(&tg->lock);
}

/* One random action on a target: the unit of the raw phases. */
static void raw_action(struct th *t)
{
	int c = rn(t, 100);

	if (t->t->nodestroy) {
		if (c < 60)
			one_cmd(t, use_cmds[rn(t, N(use_cmds))], chance(t, 30));
		else if (c < 85)
			one_native(t);
		else if (c < 95)
			mmap_fuzz(t);
		else /* anything with a legacy number that is neither a create nor a destroy */
			one_cmd(t, use_cmds[rn(t, N(use_cmds))], 0);
		return;
	}
	if (c < 22)
		one_cmd(t, create_cmds[rn(t, N(create_cmds))], chance(t, 40));
	else if (c < 52)
		one_cmd(t, use_cmds[rn(t, N(use_cmds))], chance(t, 30));
	else if (c < 60) {
		uint32_t cmd = destroy_cmds[rn(t, N(destroy_cmds))];

		one_cmd(t, cmd, chance(t, 50));
	} else if (c < 62) { /* a double destroy, once by write and once by ioctl */
		int type = (int)rn(t, OT_CHAN);
		struct obj *o;
		uint32_t h = 0;
		struct wcmd w;

		pthread_mutex_lock(&t->t->lock);
		o = pool_pick(t, type);
		if (o)
			h = o->h;
		pthread_mutex_unlock(&t->t->lock);
		if (o) {
			for (int k = 0; k < 2; k++) {
				int e;

				build(t, &w, destroy_of[type]);
				memcpy(w.body + (w.ci->has_resp ? 8 : 0), &h, 4);
				w.h = h;
				e = k ? send_invoke(t, &w) : send_write(t, &w);
				account(t, &w, e);
			}
		}
	} else if (c < 80)
		one_native(t);
	else if (c < 86)
		ring_scribble(t);
	else if (c < 91)
		mmap_fuzz(t);
	else if (c < 96)
		event_fuzz(t);
	else if (c < 98) /* a command number nobody defined */
		one_cmd(t, chance(t, 50) ? 41 + rn(t, 215) : IB_USER_VERBS_CMD_FLAG_EXTENDED | rn(t, 256), 0);
	else
		one_cmd(t, (uint32_t)rnd(t), 0);
}

/* Destroys every raw object of a target (the end of its life), in an
 * order that mostly works; then closes its fds and unmaps its rings. */
static void raw_cleanup(struct th *t)
{
	static const int order[] = { OT_QP, OT_SRQ, OT_AH, OT_MR, OT_CQ, OT_PD };
	struct target *tg = t->t;

	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; k < N(order); k++)
			for (int i = 0; i < 2 * MAXOBJ && pool_count(tg, order[k]); i++) {
				int before = pool_count(tg, order[k]);

				raw_destroy_one(t, order[k]);
				if (pool_count(tg, order[k]) == before && pass == 1) {
					/* refused twice (a QP of another file's CQ...): forget it */
					pthread_mutex_lock(&tg->lock);
					for (int j = 0; j < tg->n; j++)
						if (tg->o[j].type == order[k]) {
							retire_maps(tg, &tg->o[j]);
							tg->o[j] = tg->o[--tg->n];
							break;
						}
					pthread_mutex_unlock(&tg->lock);
				}
			}
	pthread_mutex_lock(&tg->lock);
	for (int i = 0; i < tg->n; i++) {
		if (tg->o[i].type == OT_CHAN || tg->o[i].type == OT_ASYNC)
			close((int)tg->o[i].h);
		retire_maps(tg, &tg->o[i]);
	}
	tg->n = 0;
	for (int i = 0; i < tg->ndead; i++)
		unmap_rmap(&tg->dead[i]);
	tg->ndead = 0;
	pthread_mutex_unlock(&tg->lock);
}

static void target_init(struct target *tg, int fd, int async_fd)
{
	memset(tg, 0, sizeof(*tg));
	tg->fd = fd;
	tg->async_fd = async_fd;
	pthread_mutex_init(&tg->lock, NULL);
	tg->mrbuf = map_anon(MRBUF, 1);
	for (size_t i = 0; i < MRBUF; i += PAGE)
		tg->mrbuf[i] = (uint8_t)i;
}

/* ------------------------------------------------------------ libibverbs objects */

#define VQP 5
#define VBUF (256u << 10)
#define RECV_BIT (1ull << 55)

/*
 * Objects made through libibverbs on one context: qp[0] and qp[1] an RC
 * pair, qp[2] a UD QP (with ah to this device), qp[3] and qp[4] an RC pair
 * on srq. z_*: the kernel object was destroyed behind libibverbs' back (a
 * zombie: libibverbs still has its memory and rings; it is never passed to
 * ibv_destroy_*, whose handle may by then name another object).
 */
struct vset {
	struct ibv_context *ctx;
	struct target *tg;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq[2];
	struct ibv_srq *srq;
	struct ibv_ah *ah;
	struct ibv_qp *qp[VQP];
	int z_qp[VQP], z_cq[2], z_srq, z_ah, z_mr, z_pd;
	int out[VQP], rposted[VQP], srq_posted;
	uint64_t seq;
	atomic_int stop;
};

static int verr(int r)
{
	int e = r ? (r > 0 ? r : errno) : 0;

	count(S_VERBS, e);
	return e;
}

static void *vnull(void *p)
{
	count(S_VERBS, p ? 0 : errno);
	return p;
}

static int vset_connect(struct vset *v, int a, int b)
{
	struct tl_rc_conn c = {
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC,
		.mtu = port_attr.active_mtu,
		.rq_psn = 1,
		.sq_psn = 1,
		.dgid = gid,
		.sgid_index = gid_index,
		.max_dest_rd_atomic = 1,
		.max_rd_atomic = 1,
		.timeout = 12,
		.retry_cnt = 2,
		.rnr_retry = 2,
	};
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };

	if (!v->qp[a] || !v->qp[b])
		return -1;
	verr(ibv_modify_qp(v->qp[a], &r, IBV_QP_STATE));
	c.dest_qpn = v->qp[b]->qp_num;
	return verr(tl_rc_connect(v->qp[a], &c) ? -1 : 0);
}

static int vset_ud(struct vset *v)
{
	struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };

	if (!v->qp[2])
		return -1;
	verr(ibv_modify_qp(v->qp[2], &r, IBV_QP_STATE));
	return verr(tl_ud_rts(v->qp[2], 0x11111111, 1));
}

/* Makes what it can; returns 0 when every object exists. */
static int vset_make(struct vset *v, struct ibv_context *ctx, struct target *tg)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.sq_sig_all = 1,
	};
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 2 } };
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	int ok = 1;

	memset(v, 0, sizeof(*v));
	v->ctx = ctx;
	v->tg = tg;
	v->buf = map_anon(VBUF, 0);
	if (!(v->pd = vnull(ibv_alloc_pd(ctx))))
		return -2;
	v->mr = vnull(ibv_reg_mr(v->pd, v->buf, VBUF,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					 IBV_ACCESS_REMOTE_ATOMIC));
	v->ch = vnull(ibv_create_comp_channel(ctx));
	if (v->ch) {
		fcntl(v->ch->fd, F_SETFL, O_NONBLOCK);
		protect_fd(v->ch->fd, 1);
	}
	v->cq[0] = vnull(ibv_create_cq(ctx, 256, NULL, v->ch, 0));
	v->cq[1] = vnull(ibv_create_cq(ctx, 256, NULL, NULL, 0));
	if (!v->mr || !v->cq[0] || !v->cq[1])
		return -2; /* nothing to run traffic on */
	v->srq = vnull(ibv_create_srq(v->pd, &sa));
	for (int i = 0; i < VQP; i++) {
		ia.qp_type = i == 2 ? IBV_QPT_UD : IBV_QPT_RC;
		ia.send_cq = v->cq[i & 1];
		ia.recv_cq = v->cq[(i >> 1) & 1];
		ia.srq = i >= 3 ? v->srq : NULL;
		if (i >= 3 && !v->srq)
			continue;
		v->qp[i] = vnull(ibv_create_qp(v->pd, &ia));
		ok &= !!v->qp[i];
	}
	memcpy(&aa.grh.dgid, &gid, sizeof(gid));
	aa.grh.sgid_index = (uint8_t)gid_index;
	aa.grh.hop_limit = 64;
	v->ah = vnull(ibv_create_ah(v->pd, &aa));
	ok &= !vset_connect(v, 0, 1) && !vset_connect(v, 1, 0) && !vset_ud(v);
	if (v->srq)
		ok &= !vset_connect(v, 3, 4) && !vset_connect(v, 4, 3);
	/* the kernel handles of these objects: never destroyed by a raw storm */
	pthread_mutex_lock(&tg->lock);
	tg->nvh = tg->nvqpn = 0;
	for (int i = 0; i < VQP; i++)
		if (v->qp[i]) {
			tg->vh[tg->nvh++] = v->qp[i]->handle;
			tg->vqpn[tg->nvqpn++] = v->qp[i]->qp_num;
		}
	tg->vh[tg->nvh++] = v->pd->handle;
	tg->vh[tg->nvh++] = v->mr->handle;
	tg->vh[tg->nvh++] = v->cq[0]->handle;
	tg->vh[tg->nvh++] = v->cq[1]->handle;
	if (v->srq)
		tg->vh[tg->nvh++] = v->srq->handle;
	if (v->ah)
		tg->vh[tg->nvh++] = v->ah->handle;
	pthread_mutex_unlock(&tg->lock);
	return ok && v->srq && v->ah ? 0 : -1;
}

static void vset_post(struct th *t, struct vset *v, int i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)v->buf + (size_t)i * 32768, .length = 64, .lkey = v->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	struct ibv_recv_wr rw = { .sg_list = &sge, .num_sge = 1 }, *rbad;
	int peer = i == 0 ? 1 : i == 1 ? 0 : i == 3 ? 4 : 3;
	int e;

	if (i < 3 && v->rposted[i] < 16) {
		sge.addr += 16384;
		sge.length = i == 2 ? 2048 : 4096;
		rw.wr_id = ((uint64_t)i << 56) | RECV_BIT | v->seq++;
		e = verr(ibv_post_recv(v->qp[i], &rw, &rbad));
		if (!e)
			v->rposted[i]++;
		sge.addr -= 16384;
	}
	if (v->out[i] >= 8)
		return;
	wr.wr_id = ((uint64_t)i << 56) | v->seq++;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (i == 2) {
		wr.opcode = IBV_WR_SEND;
		wr.wr.ud.ah = v->ah;
		wr.wr.ud.remote_qpn = v->qp[2]->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		if (!v->ah)
			return;
	} else {
		static const int ops[] = { IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE,
					   IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
					   IBV_WR_ATOMIC_CMP_AND_SWP };

		wr.opcode = ops[rn(t, N(ops))];
		wr.wr.rdma.remote_addr = (uintptr_t)v->buf + (size_t)peer * 32768 + 8192;
		wr.wr.rdma.rkey = v->mr->rkey;
		sge.length = 1 + rn(t, 4096);
		if (wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			wr.wr.atomic.remote_addr = (uintptr_t)v->buf + (size_t)peer * 32768 + 8192;
			wr.wr.atomic.rkey = v->mr->rkey;
			wr.wr.atomic.compare_add = rnd(t);
			wr.wr.atomic.swap = rnd(t);
			sge.length = 8;
		}
		if (wr.opcode == IBV_WR_SEND && chance(t, 15)) {
			wr.send_flags |= IBV_SEND_INLINE;
			sge.length = rn(t, 65);
		}
	}
	if (rn(t, 1000) < 3) /* a key of nothing: a local protection error */
		sge.lkey ^= 0x5a5a00;
	e = verr(ibv_post_send(v->qp[i], &wr, &bad));
	if (!e)
		v->out[i]++;
}

static void vset_poll(struct vset *v)
{
	struct ibv_wc wc[16];

	for (int k = 0; k < 2; k++) {
		int n = ibv_poll_cq(v->cq[k], 16, wc);

		count(S_VERBS, n < 0 ? EIO : 0);
		for (int j = 0; j < n; j++) {
			uint64_t i = wc[j].wr_id >> 56;

			atomic_fetch_add(&st_completions, 1);
			if (wc[j].status != IBV_WC_SUCCESS)
				atomic_fetch_add(&st_wc_err, 1);
			if (i >= VQP)
				continue;
			if (wc[j].wr_id & RECV_BIT) {
				if (i >= 3)
					v->srq_posted -= v->srq_posted > 0;
				else
					v->rposted[i] -= v->rposted[i] > 0;
			} else {
				v->out[i] -= v->out[i] > 0;
			}
		}
	}
}

/* posts, receives and polls until told to stop */
static void *vset_traffic(void *arg)
{
	struct th *t = arg;
	struct vset *v = (struct vset *)((uint8_t *)t->stop - offsetof(struct vset, stop));
	unsigned long it = 0;

	while (!th_over(t)) {
		for (int i = 0; i < VQP; i++)
			if (v->qp[i])
				vset_post(t, v, i);
		if (v->srq && v->srq_posted < 32) {
			struct ibv_sge sge = { .addr = (uintptr_t)v->buf + 200000, .length = 4096, .lkey = v->mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = (3ull << 56) | RECV_BIT | v->seq++, .sg_list = &sge,
						  .num_sge = 1 },
					   *bad;

			if (!verr(ibv_post_srq_recv(v->srq, &rw, &bad)))
				v->srq_posted++;
		}
		vset_poll(v);
		if (++it % 32 == 0 && v->ch) {
			struct ibv_cq *ecq;
			void *ectx;

			/* Wait at most 100 ms, and read only what poll() says is
			 * there: the channel is non-blocking, but a hostile close
			 * elsewhere in this process may have given its number to
			 * another file (a blocking channel from a raw
			 * CREATE_COMP_CHANNEL, /dev/null), and an armed CQ whose
			 * QPs were destroyed never completes again. */
			struct pollfd pf = { .fd = v->ch->fd, .events = POLLIN };

			verr(ibv_req_notify_cq(v->cq[0], (int)rn(t, 2)));
			if (poll(&pf, 1, 100) == 1 && (pf.revents & POLLIN) && !ibv_get_cq_event(v->ch, &ecq, &ectx)) {
				ibv_ack_cq_events(ecq, 1);
				atomic_fetch_add(&st_events, 1);
			}
		}
	}
	return NULL;
}

/* A raw destroy of one of the set's kernel objects (write or ioctl). */
static void vset_raw_destroy(struct th *t, struct vset *v)
{
	int k = (int)rn(t, 11), type, *z;
	uint32_t h;
	struct wcmd w;
	int e;

	if (k < VQP && v->qp[k] && !v->z_qp[k]) {
		type = OT_QP, h = v->qp[k]->handle, z = &v->z_qp[k];
	} else if (k == 5 && !v->z_cq[0]) {
		type = OT_CQ, h = v->cq[0]->handle, z = &v->z_cq[0];
	} else if (k == 6 && !v->z_cq[1]) {
		type = OT_CQ, h = v->cq[1]->handle, z = &v->z_cq[1];
	} else if (k == 7 && v->srq && !v->z_srq) {
		type = OT_SRQ, h = v->srq->handle, z = &v->z_srq;
	} else if (k == 8 && v->ah && !v->z_ah) {
		type = OT_AH, h = v->ah->handle, z = &v->z_ah;
	} else if (k == 9 && !v->z_mr) {
		type = OT_MR, h = v->mr->handle, z = &v->z_mr;
	} else if (k == 10 && !v->z_pd) {
		type = OT_PD, h = v->pd->handle, z = &v->z_pd;
	} else {
		return;
	}
	{
		/* build with a target that allows destroys, on the set's file */
		struct target *saved = t->t, tmp;

		memset(&tmp, 0, sizeof(tmp));
		tmp.fd = v->tg->fd;
		tmp.async_fd = -1;
		pthread_mutex_init(&tmp.lock, NULL);
		tmp.mrbuf = saved->mrbuf;
		t->t = &tmp;
		build(t, &w, destroy_of[type]);
		memcpy(w.body + (w.ci->has_resp ? 8 : 0), &h, 4);
		w.resp = (uintptr_t)t->scratch;
		e = chance(t, 50) ? send_invoke(t, &w) : send_write(t, &w);
		if (!e) { /* and again: a double destroy */
			*z = 1;
			atomic_fetch_add(&st_zombies, 1);
			if (chance(t, 40))
				send_write(t, &w);
		}
		t->t = saved;
		pthread_mutex_destroy(&tmp.lock);
	}
}

/* Attacks the set's objects while the traffic thread uses them. */
static void *vset_attack(void *arg)
{
	struct th *t = arg;
	struct vset *v = (struct vset *)((uint8_t *)t->stop - offsetof(struct vset, stop));

	while (!th_over(t)) {
		int c = rn(t, 100), i = (int)rn(t, VQP);

		sleep_us(rn(t, 20000));
		if (th_over(t))
			break;
		if (c < 14) {
			vset_raw_destroy(t, v);
		} else if (c < 22 && v->qp[i]) {
			struct ibv_qp_attr a = { .qp_state = chance(t, 70) ? IBV_QPS_ERR : IBV_QPS_RESET };

			verr(ibv_modify_qp(v->qp[i], &a, IBV_QP_STATE));
		} else if (c < 42) {
			if (i == 2)
				vset_ud(v);
			else if (i < 2 || v->srq)
				vset_connect(v, i, i == 0 ? 1 : i == 1 ? 0 : i == 3 ? 4 : 3);
		} else if (c < 52 && v->qp[i]) { /* a raw modify of a verbs QP */
			struct wcmd w;

			build(t, &w, IB_USER_VERBS_CMD_MODIFY_QP);
			fill_modify(t, (struct ib_uverbs_modify_qp *)w.body, v->qp[i]->handle,
				    i == 2 ? IBV_QPT_UD : IBV_QPT_RC);
			chance(t, 50) ? send_write(t, &w) : send_invoke(t, &w);
		} else if (c < 60) { /* a raw resize (the provider keeps the old ring) */
			struct wcmd w;

			build(t, &w, IB_USER_VERBS_CMD_RESIZE_CQ);
			((struct ib_uverbs_resize_cq *)w.body)->cq_handle = v->cq[rn(t, 2)]->handle;
			w.resp = (uintptr_t)t->scratch;
			chance(t, 50) ? send_write(t, &w) : send_invoke(t, &w);
		} else if (c < 66) {
			verr(ibv_resize_cq(v->cq[rn(t, 2)], (int)(16 + rn(t, 1024))));
		} else if (c < 76 && v->qp[i]) { /* raw posts naming a verbs QP */
			struct wcmd w;

			build(t, &w, chance(t, 50) ? IB_USER_VERBS_CMD_POST_SEND : IB_USER_VERBS_CMD_POST_RECV);
			((struct ib_uverbs_post_send *)w.body)->qp_handle = v->qp[i]->handle;
			chance(t, 50) ? send_write(t, &w) : send_invoke(t, &w);
		} else if (c < 82 && v->srq) {
			struct ibv_srq_attr a = { .srq_limit = rn(t, 64), .max_wr = rn(t, 128) };

			verr(ibv_modify_srq(v->srq, &a, chance(t, 80) ? IBV_SRQ_LIMIT : IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT));
		} else if (c < 88 && v->qp[i]) {
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;

			verr(ibv_query_qp(v->qp[i], &a, (int)(rnd(t) & 0x1ffffff), &ia));
		} else {
			raw_action(t); /* anything that neither creates nor destroys */
		}
	}
	return NULL;
}

/* Destroys what is not a zombie, in order; keeps what refuses (the
 * process's exit releases it). */
static void vset_destroy(struct vset *v)
{
	int mr_gone = v->z_mr;

	for (int i = 0; i < VQP; i++)
		if (v->qp[i] && !v->z_qp[i] && verr(ibv_destroy_qp(v->qp[i])))
			v->z_qp[i] = 1;
	if (v->srq && !v->z_srq && verr(ibv_destroy_srq(v->srq)))
		v->z_srq = 1;
	if (v->ah && !v->z_ah && verr(ibv_destroy_ah(v->ah)))
		v->z_ah = 1;
	if (v->mr && !v->z_mr)
		mr_gone = !verr(ibv_dereg_mr(v->mr));
	for (int k = 0; k < 2; k++)
		if (v->cq[k] && !v->z_cq[k] && verr(ibv_destroy_cq(v->cq[k])))
			v->z_cq[k] = 1;
	if (v->ch) {
		int fd = v->ch->fd;

		/* refused while a zombie CQ still counts as its user */
		if (!verr(ibv_destroy_comp_channel(v->ch)))
			protect_fd(fd, 0);
	}
	if (v->pd && !v->z_pd)
		verr(ibv_dealloc_pd(v->pd));
	if (mr_gone || !v->mr)
		munmap(v->buf, VBUF);
	v->tg->nvh = v->tg->nvqpn = 0;
}

/* ------------------------------------------------------------ phases */

static struct ibv_context *ctx_v, *ctx_r;
static struct target tg_v, tg_r;
static uint64_t phase_no;
static atomic_long phase_deadline_ms;

static uint64_t sub_seed(int k)
{
	return seed * 1000003u + phase_no * 7919u + (uint64_t)k;
}

struct runner {
	pthread_t tid;
	struct th t;
	void *(*fn)(void *);
	const char *role;
};

/* Who each thread is, for the watchdog's report. */
static struct {
	pid_t tid;
	const char *role;
} roles[64];
static pthread_mutex_t roles_lock = PTHREAD_MUTEX_INITIALIZER;

static void set_role(const char *role)
{
	pid_t tid = (pid_t)syscall(SYS_gettid);

	pthread_mutex_lock(&roles_lock);
	for (int i = 0; i < 64; i++)
		if (!roles[i].tid || roles[i].tid == tid) {
			roles[i].tid = tid;
			roles[i].role = role;
			break;
		}
	pthread_mutex_unlock(&roles_lock);
}

static void clear_role(void)
{
	pid_t tid = (pid_t)syscall(SYS_gettid);

	pthread_mutex_lock(&roles_lock);
	for (int i = 0; i < 64; i++)
		if (roles[i].tid == tid)
			roles[i].tid = 0;
	pthread_mutex_unlock(&roles_lock);
}

static const char *role_of(pid_t tid)
{
	for (int i = 0; i < 64; i++)
		if (roles[i].tid == tid)
			return roles[i].role;
	return "?";
}

static void *run_role(void *arg)
{
	struct runner *r = arg;
	void *ret;

	set_role(r->role);
	ret = r->fn(&r->t);
	clear_role();
	return ret;
}

static void *raw_loop(void *arg)
{
	struct th *t = arg;

	while (!th_over(t))
		raw_action(t);
	return NULL;
}

static void start(struct runner *r, int k, struct target *tg, atomic_int *stop, double end, void *(*fn)(void *))
{
	th_init(&r->t, sub_seed(k), tg);
	r->t.stop = stop;
	r->t.end = end;
	r->fn = fn;
	r->role = fn == raw_loop ? (tg == &tg_r ? "raw(ctx_r)" : tg == &tg_v ? "raw(ctx_v)" : "raw(other)")
		  : fn == vset_traffic ? "traffic" : "attack";
	if (pthread_create(&r->tid, NULL, run_role, r)) {
		perror("uverbs_fuzz: pthread_create");
		exit(2);
	}
}

static void join(struct runner *r)
{
	pthread_join(r->tid, NULL);
	th_free(&r->t);
}

/* raw: one thread; raw-mt: several on one file */
static void phase_raw(struct th *m, double end, int threads)
{
	struct runner r[4];
	atomic_int stop = 0;

	for (int i = 0; i < threads; i++)
		start(&r[i], i, &tg_r, &stop, end, raw_loop);
	for (int i = 0; i < threads; i++)
		join(&r[i]);
	if (chance(m, 10)) { /* now and then everything goes, in order */
		m->t = &tg_r;
		raw_cleanup(m);
	}
}

static void phase_verbs(struct th *m, double end)
{
	struct vset *v = calloc(1, sizeof(*v));
	struct runner r[4];
	int n = 0;

	int made = vset_make(v, ctx_v, &tg_v);

	if (made && !quiet)
		printf("uverbs_fuzz: (verbs set incomplete: %s)\n", strerror(errno));
	if (made == -2) {
		vset_destroy(v);
		free(v);
		return;
	}
	start(&r[n++], 0, &tg_v, &v->stop, end, vset_traffic);
	start(&r[n++], 1, &tg_v, &v->stop, end, vset_attack);
	if (chance(m, 50))
		start(&r[n++], 2, &tg_v, &v->stop, end, raw_loop); /* non-destroying raw commands */
	if (chance(m, 40))
		start(&r[n++], 3, &tg_r, &v->stop, end, raw_loop); /* the other file, at the same time */
	for (int i = 0; i < n; i++)
		join(&r[i]);
	vset_destroy(v);
	free(v);
}

/* the uverbs mappings of this process: their start addresses */
static int uverbs_maps(uintptr_t *start, size_t *len, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && n < max) {
		unsigned long s, e;

		if (strstr(line, "/dev/infiniband/uverbs") && sscanf(line, "%lx-%lx", &s, &e) == 2) {
			start[n] = s;
			len[n++] = e - s;
		}
	}
	fclose(f);
	return n;
}

static void child_main(struct th *t, struct vset *v)
{
	double end = now() + 0.05 + rn(t, 800) / 1000.0;
	uintptr_t s[256];
	size_t l[256];
	int n = uverbs_maps(s, l, 256);

	alarm(3);
	t->child = 1;
	t->end = end;
	while (now() < end) {
		int c = rn(t, 100);

		if (c < 25 && n) { /* the inherited rings */
			int k = rn(t, n);
			volatile uint8_t *p = (uint8_t *)s[k];

			if (chance(t, 50))
				p[rn(t, (uint32_t)l[k])] = (uint8_t)rnd(t);
			else
				(void)p[rn(t, (uint32_t)l[k])];
		} else if (c < 45) {
			int i = rn(t, VQP);

			if (v->qp[i] && !v->z_qp[i])
				vset_post(t, v, i);
			vset_poll(v);
		} else if (c < 65) {
			t->t = &tg_v;
			raw_action(t); /* nothing that destroys the parent's verbs objects */
		} else if (c < 85) {
			t->t = &tg_r;
			raw_action(t);
		} else if (c < 90) { /* a context of its own, left to the exit */
			struct ibv_context *c2 = ibv_open_device(device);
			struct ibv_pd *pd;
			struct ibv_cq *cq;

			if (c2 && (pd = ibv_alloc_pd(c2)) && (cq = ibv_create_cq(c2, 16, NULL, NULL, 0))) {
				struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
							       .cap = { 8, 8, 1, 1, 0 } };

				ibv_create_qp(pd, &ia);
				ibv_reg_mr(pd, tg_r.mrbuf, PAGE, IBV_ACCESS_LOCAL_WRITE);
			}
		} else if (c < 95) { /* exit with a thread mid-command */
			struct runner r;
			atomic_int stop = 0;

			start(&r, 9, chance(t, 50) ? &tg_r : &tg_v, &stop, now() + 1, raw_loop);
			sleep_us(rn(t, 3000));
			_exit(4);
		} else {
			close(ctx_v->cmd_fd); /* the child's copy only */
		}
	}
	_exit(0);
}

static void phase_fork(struct th *m, double end)
{
	struct vset *v = calloc(1, sizeof(*v));
	struct runner r[2];
	int n = 0, status = 0;
	pid_t pid;
	double t0;

	if (vset_make(v, ctx_v, &tg_v) == -2) {
		vset_destroy(v);
		free(v);
		return;
	}
	if (chance(m, 70))
		start(&r[n++], 0, &tg_v, &v->stop, end, vset_traffic);
	sleep_us(rn(m, 50000));
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		child_main(m, v);
	if (pid < 0) {
		count(S_VERBS, errno);
	} else {
		atomic_fetch_add(&st_forks, 1);
		sleep_us(rn(m, 300000));
		if (chance(m, 30)) {
			kill(pid, SIGKILL);
			atomic_fetch_add(&st_child_killed, 1);
		}
		for (t0 = now(); waitpid(pid, &status, WNOHANG) == 0;) {
			if (now() - t0 > 5) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				break;
			}
			sleep_us(2000);
		}
		if (WIFSIGNALED(status))
			atomic_fetch_add(&st_child_signal, 1);
		else
			atomic_fetch_add(&st_child_exit, 1);
	}
	/* the parent goes on with the same objects a while */
	while (now() < end) {
		if (n) {
			sleep_us(1000);
			continue;
		}
		for (int i = 0; i < VQP; i++)
			if (v->qp[i])
				vset_post(m, v, i);
		vset_poll(v);
	}
	atomic_store(&v->stop, 1);
	for (int i = 0; i < n; i++)
		join(&r[i]);
	vset_destroy(v);
	free(v);
}

/*
 * A second context, busy, whose file goes away under its commands:
 * close() with raw commands in flight (and its rings unmapped first, so
 * that the last reference is an in-flight command's), or dup2() of
 * /dev/null over it with traffic running (the last reference is then the
 * munmap of its rings).
 */
static void phase_close(struct th *m, double end)
{
	uintptr_t s0[512], s1[512];
	size_t l0[512], l1[512];
	int n0 = uverbs_maps(s0, l0, 512), n1, dup_way = chance(m, 50), fd;
	struct ibv_context *c = ibv_open_device(device);
	struct target *tg;
	struct vset *v;
	struct runner r[4];
	int n = 0;
	double mid;

	if (!vnull(c))
		return;
	tg = malloc(sizeof(*tg));
	v = calloc(1, sizeof(*v));
	target_init(tg, c->cmd_fd, -1);
	tg->no_ring_touch = !dup_way;
	if (vset_make(v, c, tg) == -2)
		dup_way = 0, tg->no_ring_touch = 1; /* no traffic to run */
	tg->nvh = tg->nvqpn = 0; /* any handle may go here */
	m->t = tg;
	for (int i = 0; i < 200 && now() < end; i++)
		raw_action(m);
	mid = now() + (end - now()) * (0.2 + rn(m, 60) / 100.0);
	for (int i = 0; i < 2 + (int)rn(m, 2); i++)
		start(&r[n++], i, tg, &v->stop, end + 1, raw_loop);
	if (dup_way)
		start(&r[n++], 5, tg, &v->stop, end + 1, vset_traffic);
	while (now() < mid)
		sleep_us(1000);
	fd = c->cmd_fd;
	if (dup_way) {
		int dn = open("/dev/null", O_RDWR);

		dup2(dn, fd);
		close(dn);
	} else {
		n1 = uverbs_maps(s1, l1, 512);
		for (int i = 0; i < n1; i++) {
			int old = 0;

			for (int j = 0; j < n0; j++)
				old |= s0[j] == s1[i];
			if (!old)
				munmap((void *)s1[i], l1[i]);
		}
		close(fd);
	}
	atomic_fetch_add(&st_closes, 1);
	sleep_us(rn(m, 50000));
	atomic_store(&v->stop, 1);
	for (int i = 0; i < n; i++)
		join(&r[i]);
	/* every uverbs map made since the phase began goes: the file's last
	 * reference in the dup2 case */
	n1 = uverbs_maps(s1, l1, 512);
	for (int i = 0; i < n1; i++) {
		int old = 0;

		for (int j = 0; j < n0; j++)
			old |= s0[j] == s1[i];
		if (!old)
			munmap((void *)s1[i], l1[i]);
	}
	if (dup_way)
		close(fd);
	for (int i = 0; i < tg->n; i++)
		if (tg->o[i].type == OT_CHAN || tg->o[i].type == OT_ASYNC)
			close((int)tg->o[i].h);
	if (v->ch) {
		protect_fd(v->ch->fd, 0);
		close(v->ch->fd);
	}
	close(c->async_fd);
	munmap(tg->mrbuf, MRBUF + PAGE);
	/* c, v and what libibverbs allocated for them stay allocated: their
	 * file is gone, nothing may be destroyed through it */
	free(tg);
}

/* The device opened by hand: commands before and after GET_CONTEXT. */
static void phase_rawfd(struct th *m, double end)
{
	int fd = open(uverbs_path, O_RDWR | O_CLOEXEC);
	struct target *tg;
	struct runner r[2];
	atomic_int stop = 0;
	int n = 0, tries;

	if (fd < 0)
		return;
	tg = malloc(sizeof(*tg));
	target_init(tg, fd, -1);
	m->t = tg;
	for (int i = 0; i < 40; i++) /* no context yet */
		raw_action(m);
	for (tries = 1 + rn(m, 3); tries > 0; tries--) {
		struct wcmd w;
		int e;

		memset(&w, 0, sizeof(w));
		w.cmd = IB_USER_VERBS_CMD_GET_CONTEXT;
		w.body = m->in;
		w.len = sizeof(struct ib_uverbs_get_context);
		memset(w.body, 0, 64);
		w.resp_len = sizeof(struct ib_uverbs_get_context_resp);
		w.drv_out = chance(m, 70) ? 8 : 4 * rn(m, 8);
		w.resp = chance(m, 90) ? (uintptr_t)m->scratch : bad_ptr(m);
		{
			static const struct cmdinfo gc = { "get_context", 8, 8, 8, 0, 1, 0, 0, 0 };

			w.ci = &gc;
		}
		if (chance(m, 10))
			perturb(m, &w);
		e = chance(m, 60) ? send_write(m, &w) : send_invoke(m, &w);
		if (!e && w.resp == (uintptr_t)m->scratch && tg->async_fd < 0) {
			uint32_t afd;

			memcpy(&afd, m->scratch, 4);
			if (new_event_fd((int)afd, -1)) {
				tg->async_fd = (int)afd;
				fcntl(tg->async_fd, F_SETFL, O_NONBLOCK);
			}
		}
	}
	for (int i = 0; i < 1 + (int)rn(m, 2); i++)
		start(&r[n++], i, tg, &stop, end, raw_loop);
	for (int i = 0; i < n; i++)
		join(&r[i]);
	if (chance(m, 50)) {
		raw_cleanup(m);
		close(fd);
	} else { /* closed with everything live; then its maps go */
		close(fd);
		for (int i = 0; i < tg->n; i++) {
			if (tg->o[i].type == OT_CHAN || tg->o[i].type == OT_ASYNC)
				close((int)tg->o[i].h);
			for (int k = 0; k < 2; k++)
				unmap_rmap(&tg->o[i].m[k]);
		}
		for (int i = 0; i < tg->ndead; i++)
			unmap_rmap(&tg->dead[i]);
	}
	atomic_fetch_add(&st_closes, 1);
	if (tg->async_fd >= 0)
		close(tg->async_fd);
	munmap(tg->mrbuf, MRBUF + PAGE);
	free(tg);
}

/* ------------------------------------------------------------ reports */

static void print_classes(int kind)
{
	unsigned long n = total(kind);

	printf("  %s %lu:", s_name[kind], n);
	for (int e = 0; e <= NERR; e++) {
		const char *name;

		if (!st[kind][e])
			continue;
		name = e == 0 ? "ok" : e == NERR ? "other" : strerrorname_np(e);
		printf(" %s %lu", name ? name : "?", (unsigned long)st[kind][e]);
	}
	printf("\n");
}

static void progress(double t0)
{
	printf("uverbs_fuzz: %.1f s: %lu commands (write %lu, ioctl %lu), %lu verbs calls, %lu maps, %lu forks; phase %s\n",
	       now() - t0, total(S_WRITE) + total(S_IOCTL), total(S_WRITE), total(S_IOCTL), total(S_VERBS), total(S_MMAP),
	       (unsigned long)st_forks, phase_now);
	fflush(stdout);
}

/* SIGUSR2: the thread's own backtrace (addresses: addr2line -e uverbs_fuzz) */
static void backtrace_handler(int sig)
{
	void *b[40];
	char line[96];
	int n = backtrace(b, 40);
	int l = snprintf(line, sizeof(line), "uverbs_fuzz:   backtrace of thread %ld (%s):\n", (long)syscall(SYS_gettid),
			 role_of((pid_t)syscall(SYS_gettid)));

	(void)sig;
	if (write(1, line, (size_t)l) < 0 || n <= 0)
		return;
	backtrace_symbols_fd(b, n, 1);
}

/*
 * SIGSEGV, SIGBUS, SIGILL, SIGFPE: the fuzzer itself (or libibverbs, or the
 * provider under it) touched memory it should not. What the log needs to
 * tell whose bug it is: the thread's role and phase, the address and
 * si_code, the mapping that holds the address (/proc/self/maps), the
 * backtrace; then the default action (the exit status says the signal).
 */
static void fatal_handler(int sig, siginfo_t *si, void *uc)
{
	char line[256];
	pid_t tid = (pid_t)syscall(SYS_gettid);
	uintptr_t a = (uintptr_t)si->si_addr;
	void *b[40];
	int n, l, fd;

	(void)uc;
	l = snprintf(line, sizeof(line),
		     "uverbs_fuzz: signal %d (si_code %d) at address %#lx in thread %ld (%s), phase %s; seed %" PRIu64 "\n",
		     sig, si->si_code, (unsigned long)a, (long)tid, role_of(tid), phase_now, seed);
	if (write(1, line, (size_t)l) < 0)
		goto out;
	fd = open("/proc/self/maps", O_RDONLY);
	if (fd >= 0) { /* the mapping around the address, if any */
		static char maps[1 << 16];
		ssize_t got = read(fd, maps, sizeof(maps) - 1), m;
		char *p = maps;

		for (m = got; m > 0 && (size_t)m < sizeof(maps) - 1;) {
			ssize_t r = read(fd, maps + m, sizeof(maps) - 1 - (size_t)m);

			if (r <= 0)
				break;
			m += r;
			got = m;
		}
		close(fd);
		maps[got > 0 ? got : 0] = 0;
		while (p && *p) {
			char *e = strchr(p, '\n');
			unsigned long lo = strtoul(p, NULL, 16), hi = strtoul(strchr(p, '-') ? strchr(p, '-') + 1 : p, NULL, 16);

			if (e)
				*e = 0;
			if (a >= lo - 65536 && a < hi + 65536) {
				l = snprintf(line, sizeof(line), "uverbs_fuzz:   %s %s\n", a >= lo && a < hi ? "in" : "near", p);
				if (write(1, line, (size_t)l) < 0)
					break;
			}
			p = e ? e + 1 : NULL;
		}
	}
	n = backtrace(b, 40);
	if (n > 0)
		backtrace_symbols_fd(b, n, 1);
out:
	signal(sig, SIG_DFL);
	raise(sig);
}

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = 0;
	if (f) {
		if (!fgets(buf, (int)len, f))
			buf[0] = 0;
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
}

/* Every thread: its role, state, where it sleeps, its system call; then
 * the backtraces of those that can still run a signal handler. */
static void dump_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t tids[256];
	int n = 0;

	if (!d)
		return;
	while ((e = readdir(d)) && n < 256) {
		char path[320], stat[512], wchan[128], sc[256];
		const char *st;

		if (e->d_name[0] == '.')
			continue;
		tids[n++] = (pid_t)atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		read_line(path, stat, sizeof(stat));
		st = strrchr(stat, ')');
		snprintf(path, sizeof(path), "/proc/self/task/%s/wchan", e->d_name);
		read_line(path, wchan, sizeof(wchan));
		snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", e->d_name);
		read_line(path, sc, sizeof(sc));
		printf("uverbs_fuzz:   thread %s (%s): state %c, wchan %s, syscall %s\n", e->d_name,
		       role_of(tids[n - 1]), st && st[1] ? st[2] : '?', wchan[0] ? wchan : "-", sc);
	}
	closedir(d);
	fflush(stdout);
	for (int i = 0; i < n; i++)
		if (tids[i] != (pid_t)syscall(SYS_gettid))
			syscall(SYS_tgkill, getpid(), tids[i], SIGUSR2);
	sleep(2);
	{
		char line[512];
		FILE *f = fopen("/proc/self/maps", "r");

		while (f && fgets(line, sizeof(line), f)) /* where the program is loaded */
			if (strstr(line, "uverbs_fuzz") && strstr(line, "r-xp"))
				printf("uverbs_fuzz:   %s", line);
		if (f)
			fclose(f);
	}
	fflush(stdout);
}

static void *watchdog(void *arg)
{
	(void)arg;
	set_role("watchdog");
	for (;;) {
		long d = atomic_load(&phase_deadline_ms);

		sleep(1);
		if (d && now() * 1000 > d + 60000) {
			printf("uverbs_fuzz: HANG: phase %s (number %" PRIu64 ") did not end within 60 s of its time\n",
			       phase_now, phase_no);
			dump_threads();
			_exit(3);
		}
	}
	return NULL;
}

/* The driver id the kernel expects in an ioctl header (not in the verbs
 * API): the one that a harmless query does not refuse with EINVAL. */
static int probe_driver_id(int fd)
{
	for (int k = -1; k < 256; k++) {
		uint64_t buf[8] = { 0 };
		struct ib_uverbs_ioctl_hdr *h = (void *)buf;
		uint32_t n = 0;

		h->driver_id = k < 0 ? FERROCE_DRIVER_ID : (uint32_t)k;
		h->object_id = UVERBS_OBJECT_DEVICE;
		h->method_id = UVERBS_METHOD_QUERY_CONTEXT;
		h->num_attrs = 1;
		h->length = sizeof(*h) + sizeof(struct ib_uverbs_attr);
		h->attrs[0].attr_id = UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS;
		h->attrs[0].len = sizeof(n);
		h->attrs[0].data = (uintptr_t)&n;
		if (!ioctl(fd, RDMA_VERBS_IOCTL, h) || errno != EINVAL) {
			driver_id = h->driver_id;
			return 0;
		}
	}
	return -1;
}

static int find_gid(struct ibv_context *c)
{
	int fallback = -1;

	for (int i = 0; i < port_attr.gid_tbl_len && i < 256; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(c, 1, (uint32_t)i, &e, 0) || e.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (e.gid.global.subnet_prefix == 0 && (e.gid.raw[10] == 0xff && e.gid.raw[11] == 0xff))
			return i; /* IPv4-mapped */
		if (fallback < 0)
			fallback = i;
	}
	return fallback;
}

static void usage(void)
{
	fprintf(stderr, "usage: uverbs_fuzz -d DEV [-s SEED] [-t SECONDS] [-g GID_INDEX] [-q] [--ioctl-get-context-again]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct rlimit rl;
	struct th m;
	pthread_t wd;
	double t0, deadline, last;
	int o;
	static const char *const names[] = { "raw", "raw-mt", "verbs", "fork", "close", "rawfd" };
	static const int weight[] = { 22, 18, 26, 10, 12, 12 };
	unsigned long by_phase[6] = { 0 };

	static const struct option longopts[] = {
		{ "ioctl-get-context-again", no_argument, &ioctl_get_context_again, 1 },
		{ 0 },
	};

	while ((o = getopt_long(argc, argv, "d:s:t:g:q", longopts, NULL)) != -1) {
		switch (o) {
		case 0: break;
		case 'd': dev_name = optarg; break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 't': seconds = atof(optarg); break;
		case 'g': gid_index = atoi(optarg); break;
		case 'q': quiet = 1; break;
		default: usage();
		}
	}
	if (!dev_name || seconds <= 0)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	{
		void *b[2];

		backtrace(b, 2); /* (loads what backtrace needs, before any signal) */
		signal(SIGUSR2, backtrace_handler);
	}
	{
		static const int fatal[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE };
		struct sigaction sa = { .sa_sigaction = fatal_handler, .sa_flags = SA_SIGINFO | SA_RESETHAND };

		for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
			sigaction(fatal[i], &sa, NULL);
	}
	set_role("main");
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	list = ibv_get_device_list(NULL);
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), dev_name))
			device = list[i];
	if (!device) {
		fprintf(stderr, "uverbs_fuzz: no device %s\n", dev_name);
		return 2;
	}
	snprintf(uverbs_path, sizeof(uverbs_path), "/dev/infiniband/%s", device->dev_name);
	ctx_v = ibv_open_device(device);
	ctx_r = ibv_open_device(device);
	if (!ctx_v || !ctx_r || ibv_query_device(ctx_v, &dev_attr) || ibv_query_port(ctx_v, 1, &port_attr)) {
		fprintf(stderr, "uverbs_fuzz: cannot open %s: %s\n", dev_name, strerror(errno));
		return 2;
	}
	if (gid_index < 0)
		gid_index = find_gid(ctx_v);
	if (gid_index < 0 || ibv_query_gid(ctx_v, 1, gid_index, &gid)) {
		fprintf(stderr, "uverbs_fuzz: no RoCE v2 GID on %s\n", dev_name);
		return 2;
	}
	if (probe_driver_id(ctx_r->cmd_fd))
		printf("uverbs_fuzz: no driver id accepted by ioctl: ioctls will all be refused\n");
	guard_page = mmap(NULL, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ro_page = map_anon(PAGE, 0);
	memset(ro_page, 0xa5, PAGE);
	mprotect(ro_page, PAGE, PROT_READ);
	protect_fd(ctx_v->async_fd, 1); /* libibverbs' own: never read here */
	target_init(&tg_v, ctx_v->cmd_fd, -1);
	tg_v.nodestroy = 1;
	target_init(&tg_r, ctx_r->cmd_fd, ctx_r->async_fd);
	fcntl(ctx_r->async_fd, F_SETFL, O_NONBLOCK);
	th_init(&m, seed, &tg_r);
	printf("uverbs_fuzz: device %s (%s, driver id %#x), GID index %d, seed %" PRIu64 ", %.0f s, uid %d\n", dev_name,
	       uverbs_path, driver_id, gid_index, seed, seconds, (int)getuid());
	pthread_create(&wd, NULL, watchdog, NULL);
	t0 = last = now();
	deadline = t0 + seconds;
	while (now() < deadline) {
		int w = rn(&m, 100), p = 0;
		double end, dur;

		while (w >= weight[p])
			w -= weight[p++];
		dur = (p == 2 || p == 3 ? 0.4 + rn(&m, 1600) / 1000.0 : 0.2 + rn(&m, 1000) / 1000.0);
		end = now() + dur < deadline ? now() + dur : deadline;
		phase_no++;
		phase_now = names[p];
		atomic_store(&phase_deadline_ms, (long)(end * 1000));
		m.rng = tl_seed(sub_seed(100));
		m.t = &tg_r;
		switch (p) {
		case 0: phase_raw(&m, end, 1); break;
		case 1: phase_raw(&m, end, 2 + (int)rn(&m, 3)); break;
		case 2: phase_verbs(&m, end); break;
		case 3: phase_fork(&m, end); break;
		case 4: phase_close(&m, end); break;
		default: phase_rawfd(&m, end); break;
		}
		by_phase[p]++;
		atomic_fetch_add(&st_phases, 1);
		if (!quiet && now() - last >= 5) {
			progress(t0);
			last = now();
		}
	}
	atomic_store(&phase_deadline_ms, (long)((now() + 30) * 1000));
	phase_now = "summary";
	printf("uverbs_fuzz: summary: seed %" PRIu64 ", %.1f s, %lu phases (", seed, now() - t0,
	       (unsigned long)st_phases);
	for (int p = 0; p < 6; p++)
		printf("%s%s %lu", p ? ", " : "", names[p], by_phase[p]);
	printf(")\n");
	print_classes(S_WRITE);
	print_classes(S_IOCTL);
	print_classes(S_VERBS);
	print_classes(S_MMAP);
	printf("  objects: %lu made by raw commands, %lu destroyed by them, %lu libibverbs objects destroyed behind its back;"
	       " %lu ring writes, %lu events read, %lu completions (%lu in error)\n",
	       (unsigned long)st_created, (unsigned long)st_destroyed, (unsigned long)st_zombies,
	       (unsigned long)st_ring_writes, (unsigned long)st_events, (unsigned long)st_completions,
	       (unsigned long)st_wc_err);
	printf("  forks %lu (children: %lu exited, %lu by a signal, %lu of them killed by the parent); %lu files or event fds closed under use\n",
	       (unsigned long)st_forks, (unsigned long)st_child_exit, (unsigned long)st_child_signal,
	       (unsigned long)st_child_killed, (unsigned long)st_closes);
	printf("uverbs_fuzz: %lu commands issued (write %lu, ioctl %lu), ran to its time limit\n",
	       total(S_WRITE) + total(S_IOCTL), total(S_WRITE), total(S_IOCTL));
	fflush(stdout);
	/* the exit releases both contexts with whatever is left in them */
	_exit(0);
}
