/*
 * random.c: the C half of mlx5cmp's random sequences (FuzzCompare in
 * hack/mlx5cmp/fuzz_test.go). It decodes its argument, a hex string, into
 * a sequence of work requests, completions the device is asked for (some
 * with an error syndrome) and polls, and runs it with rdma-core's
 * unmodified libibverbs + libmlx5 on one RC QP connected to itself, under
 * mlx5cmp's fake mlx5 kernel, telling the supervisor where it is with
 * markers written to descriptor 899 (as rc.c does).
 *
 * Its Go twin is hack/mlx5cmp/scenario/gorandom/main.go: both decode the
 * input by the spec below, byte for byte, and perform the same calls in
 * the same order; change one and you must change the other. The setup and
 * the teardown are rc.c's (common.c's), so the shared divergences apply.
 *
 *   gcc -O2 -Wall -Wextra -o /tmp/random-c hack/mlx5cmp/scenario/random.c hack/mlx5cmp/scenario/common.c -libverbs
 *   mlx5cmp run -profile hack/mlx5cmp/testdata/cx6.json -o /tmp/c.txt -- /tmp/random-c 0a0102...
 *
 * ---- The input (the same spec heads gorandom/main.go) ----
 *
 * The bytes are read in order; past the end every byte reads as 0. The
 * sequence is at most MAX_OPS ops and MAX_WRS work requests (send and
 * receive, counted as decoded, posted or not); it ends when the input is
 * used up or a limit is reached. Op number s (from 1) marks "step s.KIND".
 * Each op starts with a byte c: its kind is c % 8, its argument a = c / 8.
 *
 *   0-2 send: a list of 1 + a % 8 send WRs (fewer if MAX_WRS is reached),
 *       posted in one call. Each WR, index i in the list:
 *         o = byte: opcode o % 7, in order SEND, SEND_WITH_IMM, RDMA_WRITE,
 *             RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP,
 *             ATOMIC_FETCH_AND_ADD; local buffer (o / 7) % 2 (0: buf0 and
 *             mr0, 1: buf1 and mr1); compare_add 0 if o & 0x80, else s.
 *         f = byte: flags f & 15 (ibv_send_flags: 1 FENCE, 2 SIGNALED, 4 SOLICITED, 8 INLINE);
 *             SGE count k = f >> 4: 5 if k == 15 (over max_send_sge, so
 *             refused), else k % 5.
 *         per SGE, 3 bytes: offset (hi, lo) in the local buffer, length l:
 *             inline: l & 0x80 ? (l & 0x7f) * 2 : l % 48 (so four short
 *             ones fit max_inline_data 188, one long one may not);
 *             otherwise: l & 0x80 ? (l & 0x7f) * 64 : l; either way at
 *             most BUF_SIZE - offset.
 *         r = 2 bytes (hi, lo): the remote offset in buf1 (rkey mr1),
 *             r % (BUF_SIZE - total + 1), total the SGEs' summed length.
 *       Adjusted after decoding (every byte above is read regardless):
 *         RDMA_READ: INLINE dropped (rdmago refuses an inline READ with
 *             EINVAL; libmlx5 would copy the local data into the WQE).
 *         atomics: INLINE dropped; exactly one 8-byte SGE at the first
 *             SGE's offset & ~7 (0 with none); total 8, remote offset
 *             & ~7 (rdmago refuses other atomics with EINVAL; libmlx5
 *             posts them for the device to fail).
 *         wr_id s << 16 | i; imm_data htonl(0xa5000000 | s << 8 | i); swap
 *         0x0102030405060708 * (i + 1).
 *   3   recv: a list of 1 + a % 4 receive WRs (fewer if MAX_WRS is
 *       reached), posted in one call. Each, index i: f = byte: SGE count
 *       k = f & 15: 5 if k == 15 (over max_recv_sge), else k % 5; buffer
 *       (f >> 4) & 1; per SGE 3
 *       bytes as a send's non-inline SGE. wr_id s << 16 | (0x8000 + i).
 *   4   complete: the device executes every posted request (a == 0) or
 *       the next a of them: marker "complete" or "complete n=a".
 *   5   complete with error: "complete error=0xSS", SS = syndromes[a % 13]
 *       (every syndrome provider/mlx5/cqe.go decodes): the next request the
 *       device executes fails with it, and every one after it is flushed.
 *   6   poll: one poll of 1 + a % 16 completions, reported.
 *   7   drain: polls of 1 + a % 16 until one finds nothing (at most
 *       MAX_POLLS polls), each reported.
 * At the end: step "final", "complete", a drain of POLL_BATCH, then the
 * teardown.
 *
 * A post that fails marks "ret post_send=ERRNO bad_wr_index=N" (or
 * post_recv) after its "posted" (the ones before N were posted). A
 * send list with a request the QP must refuse (more SGEs than
 * max_send_sge, inline data over max_inline_data) is step "s.send-refused"
 * instead of "s.send": after a refused request libmlx5 rings the
 * doorbell with that request's half-written control segment, which
 * testdata/divergences-random.txt covers in those steps only.
 * Before the first op, buffer 1 is filled with (i * 13 + 5) & 0xff (buffer
 * 0 holds setup's (i * 7 + 3) & 0xff).
 * The device writes every completion before "complete" returns, so every
 * poll's result is deterministic and every poll is reported.
 *
 * The QP in error: once a poll has returned a completion with an error
 * status, the program posts no more receives (a recv op reads its bytes
 * and marks "ret recv_skipped=1"): rdmago's uverbs flushes a receive
 * posted to a failed RC QP itself (QP.PostRecv), where libmlx5 hands it
 * to the device. Sends go on: the device flushes them (WR_FLUSH_ERR).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include "common.h"

const char prog_name[] = "random-c";
const char prog_args[] = "HEX";

enum {
	MAX_OPS = 64,
	MAX_WRS = 64, /* below max_send_wr (85) and max_recv_wr (64): no post overflows */
	MAX_SGE = 5, /* one over the QP's max_send_sge and max_recv_sge */
	MAX_LIST = 8,
	MAX_INPUT = 4096, /* bytes kept; a run reads fewer (MAX_OPS + MAX_WRS * 19) */
};

/* The send opcodes in the order the input numbers them. */
static const enum ibv_wr_opcode opcodes[7] = {
	IBV_WR_SEND,	   IBV_WR_SEND_WITH_IMM,      IBV_WR_RDMA_WRITE,
	IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
	IBV_WR_ATOMIC_FETCH_AND_ADD,
};

/* The syndromes "complete error=" draws from: those provider/mlx5/cqe.go decodes. */
static const uint8_t syndromes[13] = {0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11,
				      0x12, 0x13, 0x14, 0x15, 0x16, 0x22};

/*
 * The input's flag bits, which the Go side uses as wr.SendFlags; checked
 * here against verbs.h.
 */
_Static_assert(IBV_SEND_FENCE == 1 && IBV_SEND_SIGNALED == 2 && IBV_SEND_SOLICITED == 4 &&
		       IBV_SEND_INLINE == 8,
	       "ibv_send_flags");

/* ---- completions ---- */

static int qp_failed; /* a poll returned an error completion: see the top comment */

/* poll_once polls for up to batch completions and reports what it found. */
static int poll_once(int batch)
{
	struct ibv_wc wc[POLL_BATCH];
	memset(wc, 0, sizeof wc);
	int n = ibv_poll_cq(cq, batch, wc);
	if (n < 0) {
		mark("ret poll_error=1");
		return 0;
	}
	mark("poll n=%d", n);
	for (int i = 0; i < n; i++) {
		emit_wc(&wc[i]);
		if (wc[i].status != IBV_WC_SUCCESS)
			qp_failed = 1;
	}
	return n;
}

/* drain polls batch at a time until a poll finds nothing. */
static void drain(int batch)
{
	for (int polls = 0; polls < MAX_POLLS; polls++)
		if (poll_once(batch) == 0)
			return;
	mark("ret poll_timeout=%d", ETIMEDOUT);
}

/* ---- the input ---- */

static uint8_t input[MAX_INPUT];
static size_t input_len, input_pos;

/* next returns the next byte of the input, 0 past its end. */
static unsigned next(void)
{
	return input_pos < input_len ? input[input_pos++] : 0;
}

static unsigned next16(void)
{
	unsigned hi = next();
	return hi << 8 | next();
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* decode_hex fills input from s; it returns -1 for odd or non-hex input. */
static int decode_hex(const char *s)
{
	size_t n = strlen(s);
	if (n % 2)
		return -1;
	for (size_t i = 0; i + 1 < n && input_len < MAX_INPUT; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		input[input_len++] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* ---- work requests ---- */

/*
 * decode_sge reads one SGE (3 bytes) in the buffer buf of the input's
 * choice; inl selects the inline length encoding.
 */
static struct ibv_sge decode_sge(int buf, int inl)
{
	uint32_t off = next16();
	uint32_t l = next(), len;
	if (inl)
		len = l & 0x80 ? (l & 0x7f) * 2 : l % 48;
	else
		len = l & 0x80 ? (l & 0x7f) * 64 : l;
	if (len > BUF_SIZE - off)
		len = BUF_SIZE - off;
	uint8_t *base = buf ? buf1 : buf0;
	struct ibv_mr *m = buf ? mr1 : mr0;
	return (struct ibv_sge){.addr = (uintptr_t)base + off, .length = len, .lkey = m->lkey};
}

/*
 * op_send decodes and posts a list of n send WRs for op s. Its step is
 * "s.send", or "s.send-refused" when a WR of the list is one the QP must
 * refuse (see the top comment).
 */
static void op_send(unsigned s, int n)
{
	struct ibv_sge sg[MAX_LIST][MAX_SGE];
	struct ibv_send_wr w[MAX_LIST];
	int refused = 0;
	memset(w, 0, sizeof w);
	for (int i = 0; i < n; i++) {
		unsigned o = next(), f = next();
		enum ibv_wr_opcode op = opcodes[o % 7];
		int buf = (int)(o / 7 % 2);
		unsigned flags = f & (IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_FENCE |
				      IBV_SEND_SOLICITED);
		int nsge = f >> 4 == 15 ? 5 : (int)(f >> 4) % 5;
		uint64_t total = 0;
		for (int j = 0; j < nsge; j++) {
			sg[i][j] = decode_sge(buf, (flags & IBV_SEND_INLINE) != 0);
			total += sg[i][j].length;
		}
		unsigned r = next16();
		int atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
		if (op == IBV_WR_RDMA_READ || atomic)
			flags &= ~(unsigned)IBV_SEND_INLINE;
		if (atomic) {
			uint64_t off = nsge ? sg[i][0].addr - (uintptr_t)(buf ? buf1 : buf0) : 0;
			sg[i][0].addr = (uintptr_t)(buf ? buf1 : buf0) + (off & ~(uint64_t)7);
			sg[i][0].length = 8;
			sg[i][0].lkey = (buf ? mr1 : mr0)->lkey;
			nsge = 1;
			total = 8;
		}
		if (nsge > (int)caps.max_send_sge ||
		    (flags & IBV_SEND_INLINE && total > caps.max_inline_data))
			refused = 1;
		if (total > BUF_SIZE)
			total = BUF_SIZE;
		uint64_t roff = r % (BUF_SIZE - total + 1);
		if (atomic)
			roff &= ~(uint64_t)7;
		w[i].wr_id = (uint64_t)s << 16 | (unsigned)i;
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
		w[i].sg_list = nsge ? sg[i] : NULL;
		w[i].num_sge = nsge;
		w[i].opcode = op;
		w[i].send_flags = flags;
		if (op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM)
			w[i].imm_data = htonl(0xa5000000u | s << 8 | (unsigned)i);
		if (atomic) {
			w[i].wr.atomic.remote_addr = (uintptr_t)mr1->addr + roff;
			w[i].wr.atomic.rkey = mr1->rkey;
			w[i].wr.atomic.compare_add = o & 0x80 ? 0 : s;
			if (op == IBV_WR_ATOMIC_CMP_AND_SWP)
				w[i].wr.atomic.swap = 0x0102030405060708ULL * (uint64_t)(i + 1);
		} else if (op != IBV_WR_SEND && op != IBV_WR_SEND_WITH_IMM) {
			w[i].wr.rdma.remote_addr = (uintptr_t)mr1->addr + roff;
			w[i].wr.rdma.rkey = mr1->rkey;
		}
	}
	mark("step %u.send%s", s, refused ? "-refused" : "");
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(qp, w, &bad);
	mark("posted");
	if (err)
		mark("ret post_send=%d bad_wr_index=%d", err, bad ? (int)(bad - w) : -1);
}

/* op_recv decodes and posts a list of n receive WRs for op s. */
static void op_recv(unsigned s, int n)
{
	struct ibv_sge sg[MAX_LIST][MAX_SGE];
	struct ibv_recv_wr w[MAX_LIST];
	memset(w, 0, sizeof w);
	for (int i = 0; i < n; i++) {
		unsigned f = next();
		int nsge = (f & 15) == 15 ? 5 : (int)(f & 15) % 5;
		int buf = (int)(f >> 4 & 1);
		for (int j = 0; j < nsge; j++)
			sg[i][j] = decode_sge(buf, 0);
		w[i].wr_id = (uint64_t)s << 16 | (0x8000u + (unsigned)i);
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
		w[i].sg_list = nsge ? sg[i] : NULL;
		w[i].num_sge = nsge;
	}
	if (qp_failed) {
		mark("ret recv_skipped=1");
		return;
	}
	struct ibv_recv_wr *bad = NULL;
	int err = ibv_post_recv(qp, w, &bad);
	mark("posted");
	if (err)
		mark("ret post_recv=%d bad_wr_index=%d", err, bad ? (int)(bad - w) : -1);
}

/* run decodes the input and performs its ops (see the top comment). */
static void run(void)
{
	/*
	 * Buffer 1 gets a pattern too (rc.c leaves it zeroed), so that
	 * inline data is never 64 bytes of zeros: mlx5cmp's device ends a
	 * run of BlueFlame stores at an all-zero 64-byte block, and would
	 * show a longer copy word by word, with raw addresses.
	 */
	for (int i = 0; i < BUF_SIZE; i++)
		buf1[i] = (uint8_t)(i * 13 + 5);
	int wrs = 0;
	for (unsigned s = 1; s <= MAX_OPS && input_pos < input_len && wrs < MAX_WRS; s++) {
		unsigned c = next(), a = c / 8;
		int n;
		switch (c % 8) {
		case 0:
		case 1:
		case 2:
			n = 1 + (int)(a % 8);
			if (n > MAX_WRS - wrs)
				n = MAX_WRS - wrs;
			wrs += n;
			op_send(s, n);
			break;
		case 3:
			n = 1 + (int)(a % 4);
			if (n > MAX_WRS - wrs)
				n = MAX_WRS - wrs;
			wrs += n;
			mark("step %u.recv", s);
			op_recv(s, n);
			break;
		case 4:
			mark("step %u.complete", s);
			if (a == 0)
				mark("complete");
			else
				mark("complete n=%u", a);
			break;
		case 5:
			mark("step %u.error", s);
			mark("complete error=0x%02x", syndromes[a % 13]);
			break;
		case 6:
			mark("step %u.poll", s);
			poll_once(1 + (int)(a % 16));
			break;
		case 7:
			mark("step %u.drain", s);
			drain(1 + (int)(a % 16));
			break;
		}
	}
	mark("step final");
	mark("complete");
	drain(POLL_BATCH);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
	if (argc != 2 || decode_hex(argv[1]) < 0) {
		fprintf(stderr, "usage: random-c HEX (the input, an even number of hex digits)\n");
		exit(2);
	}
	setup();
	run();
	teardown();
	mark("end");
	return 0;
}
