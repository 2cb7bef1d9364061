// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * wire_fuzz: seeded streams of crafted RoCEv2/IPv4 packets at a RoCE device
 * (issue 10). Run it from another network namespace or host:
 *
 *   wire_fuzz SRC_IP DST_IP COUNT SEED [--peer IP] [--qpn-max N] [--qpn-file F]
 *
 * Sends COUNT packets from a raw socket (IP_HDRINCL, so the source address
 * can be spoofed) to UDP port 4791 of DST_IP. The IP and UDP headers are
 * always well formed (so that every packet reaches the RoCE layer, where
 * its fate must be counted); the RoCE part is crafted, packet by packet, in
 * one of these classes (chosen by the seeded generator):
 *
 *   truncated     fewer bytes than a BTH and ICRC
 *   bad-icrc      a plausible packet whose ICRC is wrong
 *   bad-pad       a pad count larger than the payload
 *   opcode        reserved, unknown or out-of-sequence opcodes
 *   psn           valid QPNs, PSNs anywhere (in and out of any window)
 *   qpn           QPNs nobody owns (random 24-bit)
 *   rkey          RDMA WRITE/READ with random R_Keys, addresses, lengths
 *   bounds        lengths past any region's end (DMA length up to 2^32-1)
 *   read          oversize READ requests
 *   atomic        misaligned atomics
 *   spoof         sources of the legitimate peer (--peer), of the target
 *                 itself and random ones, with valid QPNs
 *   ud            UD SENDs with random Q_Keys and lengths (QPN 1 included)
 *   random        random bytes after a valid-looking BTH
 *
 * "Valid QPNs" are drawn below --qpn-max (64); with --qpn-file, three in
 * four are drawn from the QPNs listed in file F (decimal, whitespace
 * separated; the target's live QPs, which the caller keeps current: the file
 * is read again every 256 packets), so that the crafted packets meet QPs
 * that exist, in whatever state they are.
 *
 * Every packet but the truncated ones carries a correct ICRC unless its
 * class is bad-icrc, so the crafted headers are what the receiver judges.
 * Prints one line per class with the number sent, and "sent N".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testlib.h"

enum { C_TRUNC, C_ICRC, C_PAD, C_OPCODE, C_PSN, C_QPN, C_RKEY, C_BOUNDS, C_READ, C_ATOMIC, C_SPOOF, C_UD, C_RANDOM, NCLASS };
static const char *class_name[NCLASS] = {
	"truncated", "bad-icrc", "bad-pad", "opcode", "psn", "qpn", "rkey",
	"bounds", "read", "atomic", "spoof", "ud", "random",
};

static uint64_t rng;
static uint64_t next(void)
{
	return tl_next(&rng);
}
static uint32_t below(uint32_t n) { return n ? (uint32_t)(next() % n) : 0; }

/* the live QPNs of --qpn-file */
#define MAX_LIVE 4096
static uint32_t live[MAX_LIVE];
static int nlive;
static void read_live(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned long q;
	int n = 0;
	if (!f)
		return; /* keep the last list */
	while (n < MAX_LIVE && fscanf(f, "%lu", &q) == 1)
		live[n++] = (uint32_t)q & 0xffffff;
	fclose(f);
	nlive = n;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static void put64(uint8_t *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, v); }

/* Extension header bytes after the BTH for an opcode (RC and UD). */
static int ext_len(uint8_t op)
{
	switch (op) {
	case 0x03: case 0x05: return 4;				/* ImmDt */
	case 0x06: case 0x0a: return 16;			/* RETH */
	case 0x09: return 4;					/* ImmDt */
	case 0x0b: return 20;					/* RETH ImmDt */
	case 0x0c: return 16;					/* RETH (READ request) */
	case 0x0d: case 0x0f: case 0x10: case 0x11: return 4;	/* AETH */
	case 0x12: return 12;					/* AETH AtomicAckETH */
	case 0x13: case 0x14: return 28;			/* AtomicETH */
	case 0x16: case 0x17: return 4;				/* IETH */
	case 0x64: return 8;					/* DETH */
	case 0x65: return 12;					/* DETH ImmDt */
	default: return 0;
	}
}

static const uint8_t rc_ops[] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
				  0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17 };

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: wire_fuzz SRC_IP DST_IP COUNT SEED [--peer IP] [--qpn-max N] [--qpn-file F]\n");
		return 2;
	}
	struct in_addr src, dst, peer;
	if (!inet_aton(argv[1], &src) || !inet_aton(argv[2], &dst)) {
		fprintf(stderr, "wire_fuzz: SRC_IP and DST_IP must be IPv4 addresses\n");
		return 2;
	}
	peer = src;
	long count = atol(argv[3]);
	rng = tl_seed(strtoull(argv[4], NULL, 0));
	uint32_t qpn_max = 64;
	const char *qpn_file = NULL;
	for (int i = 5; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--peer") && inet_aton(argv[i + 1], &peer))
			continue;
		if (!strcmp(argv[i], "--qpn-file")) {
			qpn_file = argv[i + 1];
			continue;
		}
		if (!strcmp(argv[i], "--qpn-max")) {
			qpn_max = (uint32_t)atol(argv[i + 1]);
			continue;
		}
		fprintf(stderr, "wire_fuzz: unknown option %s\n", argv[i]);
		return 2;
	}
	int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
	if (fd < 0) {
		perror("wire_fuzz: raw socket (needs CAP_NET_RAW)");
		return 1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_IP, IP_HDRINCL, &one, sizeof(one));
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr = dst };
	long sent[NCLASS] = { 0 };
	uint8_t pkt[2048];
	long n;
	for (n = 0; n < count; n++) {
		int cls = (int)below(NCLASS);
		uint8_t *ip = pkt, *udp = pkt + 20, *bth = pkt + 28;
		uint8_t op = rc_ops[below(sizeof(rc_ops))];
		if (qpn_file && n % 256 == 0)
			read_live(qpn_file);
		uint32_t qpn = nlive && below(4) ? live[below((uint32_t)nlive)] : below(qpn_max);
		uint32_t psn = (uint32_t)next() & 0xffffff;
		uint32_t plen = below(5) == 0 ? 0 : below(1100);
		struct in_addr s = src;
		int bad_icrc = 0, pad = (4 - plen % 4) % 4;

		switch (cls) {
		case C_OPCODE:
			op = (uint8_t)next();	/* anything: reserved ranges, UC/RD/CNP, ... */
			break;
		case C_QPN:
			qpn = (uint32_t)next() & 0xffffff;
			break;
		case C_RKEY:
			op = (const uint8_t[]){ 0x06, 0x0a, 0x0b, 0x0c }[below(4)];
			break;
		case C_BOUNDS:
		case C_READ:
			op = cls == C_READ ? 0x0c : 0x0a;
			break;
		case C_ATOMIC:
			op = below(2) ? 0x13 : 0x14;
			plen = 0;
			break;
		case C_SPOOF:
			if (below(3) == 0) {
				s = peer;
			} else if (below(2)) {
				s = dst;
			} else {
				/* a random unicast source: 1.0.0.0 to 223.255.255.255
				 * without 127/8 (others are martians the IP layer
				 * drops before any RoCE device sees them) */
				uint32_t a;
				do
					a = (uint32_t)next();
				while ((a >> 24) == 0 || (a >> 24) == 127 || (a >> 24) >= 224);
				s.s_addr = htonl(a);
			}
			break;
		case C_UD:
			op = below(2) ? 0x64 : 0x65;
			qpn = below(4) ? below(qpn_max) : 1;
			break;
		case C_ICRC:
			bad_icrc = 1;
			break;
		default:
			break;
		}
		int ext = ext_len(op);
		size_t tlen = 12 + ext + plen + pad + 4;
		if (cls == C_TRUNC)
			tlen = below(16);
		if (cls == C_PAD)
			plen = below(3), pad = 3, tlen = 12 + ext + plen + pad + 4;
		size_t total = 28 + tlen;
		memset(pkt, 0, 28 + 64);
		/* IPv4 (the kernel fills the checksum; the ID is ours) */
		ip[0] = 0x45;
		ip[1] = below(4) == 0 ? (uint8_t)next() : 0;
		put16(ip + 2, (uint16_t)total);
		put16(ip + 4, (uint16_t)(below(0xfffe) + 1));
		ip[8] = 64;
		ip[9] = IPPROTO_UDP;
		memcpy(ip + 12, &s, 4);
		memcpy(ip + 16, &dst, 4);
		/* UDP, checksum 0 (none, allowed on IPv4) */
		put16(udp, (uint16_t)(49152 + below(16384)));
		put16(udp + 2, 4791);
		put16(udp + 4, (uint16_t)(8 + tlen));
		if (cls != C_TRUNC) {
			bth[0] = op;
			bth[1] = (uint8_t)((below(8) == 0 ? 0x80 : 0) | (pad << 4)); /* SE sometimes, pad, TVer 0 */
			put16(bth + 2, below(8) == 0 ? (uint16_t)next() : 0xffff);
			bth[4] = 0;
			put32(bth + 4, qpn & 0xffffff);
			put32(bth + 8, psn | (below(2) ? 0x80000000u : 0)); /* AckReq */
			uint8_t *e = bth + 12;
			for (int i = 0; i < ext; i++)
				e[i] = (uint8_t)next();
			if (ext >= 16 && (op == 0x06 || op == 0x0a || op == 0x0b || op == 0x0c)) {
				/* RETH: va, rkey, dma length */
				put64(e, cls == C_RKEY ? next() : (next() & 0xffffffff));
				put32(e + 8, cls == C_RKEY ? (uint32_t)next() : (uint32_t)below(0x10000));
				put32(e + 12, cls == C_BOUNDS ? (uint32_t)next() | 0x80000000u
					      : cls == C_READ ? 0x80000000u + below(0x7fffffff) : plen);
			}
			if (op == 0x13 || op == 0x14) {
				/* AtomicETH: va (misaligned in class atomic) */
				uint64_t va = next();
				put64(e, cls == C_ATOMIC ? (va | (1 + below(7))) : (va & ~7ULL));
			}
			if (op == 0x64 || op == 0x65) {
				/* DETH: Q_Key (GSI's sometimes), source QP */
				put32(e, below(2) ? 0x80010000u : (uint32_t)next());
				put32(e + 4, (uint32_t)next() & 0xffffff);
			}
			uint8_t *payload = e + ext;
			size_t body = tlen - 12 - ext - 4;
			for (size_t i = 0; i < body; i++)
				payload[i] = cls == C_RANDOM || i < plen ? (uint8_t)next() : 0;
			if (cls == C_RANDOM) {
				for (int i = 0; i < ext; i++)
					e[i] = (uint8_t)next();
			}
			uint32_t c = tl_icrc4(ip, total);
			if (bad_icrc)
				c ^= 1u << below(32);
			uint8_t *t = pkt + total - 4;
			t[0] = c; t[1] = c >> 8; t[2] = c >> 16; t[3] = c >> 24;
		} else {
			for (size_t i = 0; i < tlen; i++)
				bth[i] = (uint8_t)next();
		}
		if (sendto(fd, pkt, total, 0, (struct sockaddr *)&to, sizeof(to)) != (ssize_t)total) {
			if (errno == ENOBUFS || errno == EAGAIN) {
				usleep(1000);
				n--;
				continue;
			}
			perror("wire_fuzz: sendto");
			return 1;
		}
		sent[cls]++;
		if ((n + 1) % 100000 == 0)
			fprintf(stderr, "wire_fuzz: %ld of %ld sent\n", n + 1, count);
	}
	for (int c = 0; c < NCLASS; c++)
		printf("class %-10s %ld\n", class_name[c], sent[c]);
	if (qpn_file)
		printf("live QPNs in the last list %d\n", nlive);
	printf("sent %ld\n", n);
	return 0;
}
