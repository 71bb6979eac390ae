/*
 * rc.c: the C half of mlx5cmp's scenario. It runs rdma-core's unmodified
 * libibverbs + libmlx5 through a fixed sequence of verbs on mlx5_0, under
 * mlx5cmp's fake mlx5 kernel, and tells the supervisor where it is with
 * markers written to descriptor 899 (see mark in common.c). The steps: RC
 * requests of every kind on the setup's QP, then, each on fresh objects,
 * every CQE error syndrome, a receive error, CQ arming, UC, UD with an
 * address handle, the ibv_wr_* batch API, an SRQ and XRC.
 *
 * Its Go twin is hack/mlx5cmp/scenario/goscen/main.go: the two must perform
 * the SAME calls in the SAME order with the SAME arguments and print the
 * same markers, so their transcripts can be diffed line by line. Change one
 * and you must change the other; the functions have the same names and
 * order in both files so they can be compared by eye. What the C programs
 * share (the markers, the setup and teardown, the completion lines) is in
 * common.c, as what the Go programs share is in package scen.
 *
 *   gcc -O2 -Wall -Wextra -o bin/mlx5cmp/scenario-c hack/mlx5cmp/scenario/rc.c hack/mlx5cmp/scenario/common.c -libverbs
 *   bin/mlx5cmp run -profile hack/mlx5cmp/testdata/cx6.json -o /tmp/c.txt -- bin/mlx5cmp/scenario-c all
 *
 * Usage: scenario-c SCENARIO, SCENARIO one of the names in scenarios[]
 * below or "all". Outside the supervisor the first marker fails with
 * EBADF and the program exits 2; without the device it exits 2 too.
 *
 * Conventions shared with the Go side:
 *  - wr_id = step id << 16 | index; receives use index 0x8000 + i.
 *  - every number in a marker is printed as decimal or as "0x%x" (never
 *    "%#x": C prints 0 as "0", Go as "0x0").
 *  - wc lines print ibv_wc's fields with ibv_wc's numeric values; the
 *    ibv_wc array is zeroed before every poll, so fields the provider does
 *    not write (byte_len of a SEND's completion, say) print as 0; the Go
 *    side zeroes its array too.
 *  - imm is printed as ibv_wc carries it: the raw __be32 imm_data read as
 *    a host uint32 (so, on a little-endian host, immediate 0x12345678
 *    prints as 0x78563412). The Go side converts wr.Completion.Imm (host
 *    order) back to that form. An invalidated rkey (IBV_WC_WITH_INV) is
 *    host order in ibv_wc and printed as is.
 *  - "ret NAME=N" is an errno (0 for success), except the cap.* lines of
 *    the setup step, which carry the queue sizes the create granted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include "common.h"

const char prog_name[] = "scenario-c";
const char prog_args[] = "SCENARIO";

enum {
	WRAP_BATCH = 10,
	/*
	 * 1100 one-SGE writes: the QP's send queue is not 64 WQE basic
	 * blocks. With max_send_sge 4 and max_inline_data 128, libmlx5 sizes
	 * an RC WQE at 384 bytes (192 of overhead for a bind, then 132 bytes
	 * of inline data) and the ring at roundup_pow2(64 * 384) = 32 KiB =
	 * 512 BBs, granting max_send_wr 85. A one-SGE write takes one BB, so
	 * it takes more than 1024 of them to wrap the ring twice (150 would
	 * not wrap it once).
	 */
	WRAP_WRITES = 1100,
	GRH_SIZE = 40, /* a UD receive starts with the GRH (or its room) */
};

/* Step ids: the high bits of wr_id. */
enum {
	ID_SEND_SGE1 = 1,
	ID_SEND_IMM = 2,
	ID_WRITE_SGE0 = 3,
	ID_WRITE_SGE1 = 4,
	ID_WRITE_SGE2 = 5,
	ID_WRITE_SGE4 = 6,
	ID_WRITE_IMM = 7,
	ID_READ = 8,
	ID_ATOMIC_CAS = 9,
	ID_ATOMIC_FADD = 10,
	ID_INLINE_SEND = 11, /* + index of the length in inline_lens */
	ID_INLINE_WRITE = 16, /* + index of the length in inline_lens */
	ID_UNSIGNALED = 21,
	ID_FENCE = 22,
	ID_SOLICITED = 23,
	ID_WRAP = 24,
	ID_FULL = 25,
	ID_ERROR = 26,
	ID_ERROR_SYND = 27,
	ID_ERROR_RECV = 28,
	ID_ARM = 29,
	ID_UC_SEND = 30,
	ID_UC_WRITE = 31,
	ID_UC_WRITE_IMM = 32,
	ID_UD_SEND = 33,
	ID_UD_SEND_IMM = 34,
	ID_BATCH = 35,
	ID_BATCH_ABORT = 36,
	ID_SRQ = 37,
	ID_XRC = 38,
	SRQ_ROUNDS = 4,
	SRQ_PER_ROUND = 5,
};

static uint64_t wrid(unsigned id, unsigned index)
{
	return (uint64_t)id << 16 | index;
}

static uint64_t recvid(unsigned id, unsigned i)
{
	return wrid(id, 0x8000 + i);
}

/* ---- completions ---- */

/*
 * drain polls until expect completions have come, 16 at a time, at most
 * MAX_POLLS times, then polls once more (which should find nothing). Polls
 * that find nothing while waiting are not reported, so that the
 * transcript does not depend on when the device writes its CQEs; every
 * other poll is.
 */
static void drain(int expect)
{
	struct ibv_wc wc[POLL_BATCH];
	int got = 0;
	for (int polls = 0; got < expect && polls < MAX_POLLS; polls++) {
		memset(wc, 0, sizeof wc);
		int n = ibv_poll_cq(cq, POLL_BATCH, wc);
		if (n < 0) {
			mark("ret poll_error=1");
			return;
		}
		if (n == 0)
			continue;
		mark("poll n=%d", n);
		for (int i = 0; i < n; i++)
			emit_wc(&wc[i]);
		got += n;
	}
	if (got < expect)
		mark("ret poll_timeout=%d", ETIMEDOUT);
	memset(wc, 0, sizeof wc);
	int n = ibv_poll_cq(cq, POLL_BATCH, wc);
	if (n < 0) {
		mark("ret poll_error=1");
		return;
	}
	mark("poll n=%d", n);
	for (int i = 0; i < n; i++)
		emit_wc(&wc[i]);
}

/* ---- work requests ---- */

/* sge0 is len bytes at off in buffer 0. */
static struct ibv_sge sge0(uint32_t off, uint32_t len)
{
	return (struct ibv_sge){.addr = (uintptr_t)buf0 + off, .length = len, .lkey = mr0->lkey};
}

/* remote1 is the address of off in buffer 1, as a peer would target it. */
static uint64_t remote1(uint32_t off)
{
	return (uintptr_t)mr1->addr + off;
}

/* post_send posts the n WRs of wrs as one linked list, then marks it posted. */
static void post_send(struct ibv_send_wr *wrs, int n)
{
	for (int i = 0; i < n; i++)
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(qp, wrs, &bad);
	if (err)
		fail("post_send", err);
	mark("posted");
}

/* post_recv posts one receive of len bytes at off in buffer 1. */
static void post_recv(uint64_t id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf1 + off, .length = len, .lkey = mr1->lkey};
	struct ibv_recv_wr rwr = {.wr_id = id, .sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad = NULL;
	int err = ibv_post_recv(qp, &rwr, &bad);
	if (err)
		fail("post_recv", err);
	mark("posted");
}

/* write_wr is a signalled RDMA write of the n SGEs to off in buffer 1. */
static struct ibv_send_wr write_wr(uint64_t id, struct ibv_sge *sg, int n, uint32_t off)
{
	return (struct ibv_send_wr){
		.wr_id = id,
		.sg_list = sg,
		.num_sge = n,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = remote1(off), .rkey = mr1->rkey},
	};
}

/* ---- scenarios ---- */

/* 1. rc.send.sge1: a receive of 256 bytes, then a signalled SEND of 64. */
static void scen_send(void)
{
	mark("step rc.send.sge1");
	post_recv(recvid(ID_SEND_SGE1, 0), 0, 256);
	struct ibv_sge sg = sge0(0, 64);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_SEND_SGE1, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	post_send(&w, 1);
	mark("complete");
	drain(2);
}

/* 2. rc.send_imm: SEND with immediate 0x12345678 into a posted receive. */
static void scen_send_imm(void)
{
	mark("step rc.send_imm");
	post_recv(recvid(ID_SEND_IMM, 0), 0x100, 256);
	struct ibv_sge sg = sge0(0x40, 32);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_SEND_IMM, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(0x12345678),
	};
	post_send(&w, 1);
	mark("complete");
	drain(2);
}

/* 3. rc.write.sge{0,1,2,4}: RDMA writes of 0, 1, 2 and 4 SGEs. */
static void scen_write(void)
{
	mark("step rc.write.sge0");
	struct ibv_send_wr w = write_wr(wrid(ID_WRITE_SGE0, 0), NULL, 0, 0);
	post_send(&w, 1);
	mark("complete");
	drain(1);

	mark("step rc.write.sge1");
	struct ibv_sge s1[1] = {sge0(0, 100)};
	w = write_wr(wrid(ID_WRITE_SGE1, 0), s1, 1, 0x100);
	post_send(&w, 1);
	mark("complete");
	drain(1);

	mark("step rc.write.sge2");
	struct ibv_sge s2[2] = {sge0(3, 17), sge0(0x200, 300)};
	w = write_wr(wrid(ID_WRITE_SGE2, 0), s2, 2, 0x1000);
	post_send(&w, 1);
	mark("complete");
	drain(1);

	mark("step rc.write.sge4");
	struct ibv_sge s4[4] = {sge0(0x10, 1), sge0(0x400, 64), sge0(0x1003, 1000),
				sge0(0x3000, 4096)};
	w = write_wr(wrid(ID_WRITE_SGE4, 0), s4, 4, 0x2000);
	post_send(&w, 1);
	mark("complete");
	drain(1);
}

/* 4. rc.write_imm: RDMA WRITE WITH IMM, consuming a posted receive. */
static void scen_write_imm(void)
{
	mark("step rc.write_imm");
	post_recv(recvid(ID_WRITE_IMM, 0), 0x800, 256);
	struct ibv_sge sg = sge0(0x80, 128);
	struct ibv_send_wr w = write_wr(wrid(ID_WRITE_IMM, 0), &sg, 1, 0x3000);
	w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w.imm_data = htonl(0x9abcdef0);
	post_send(&w, 1);
	mark("complete");
	drain(2);
}

/* 5. rc.read: RDMA READ of 512 bytes from buffer 1 into buffer 0. */
static void scen_read(void)
{
	mark("step rc.read");
	struct ibv_sge sg = sge0(0x4000, 512);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_READ, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = remote1(0x4000), .rkey = mr1->rkey},
	};
	post_send(&w, 1);
	mark("complete");
	drain(1);
}

/* 6. rc.atomic.cas and rc.atomic.fadd: 8 bytes at 8-aligned addresses. */
static void scen_atomic(void)
{
	mark("step rc.atomic.cas");
	struct ibv_sge sg = sge0(0x5000, 8);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_ATOMIC_CAS, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = {.remote_addr = remote1(0x5000),
			      .compare_add = 0,
			      .swap = 0x1122334455667788ULL,
			      .rkey = mr1->rkey},
	};
	post_send(&w, 1);
	mark("complete");
	drain(1);

	mark("step rc.atomic.fadd");
	sg = sge0(0x5008, 8);
	w = (struct ibv_send_wr){
		.wr_id = wrid(ID_ATOMIC_FADD, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.atomic = {.remote_addr = remote1(0x5008), .compare_add = 0x10, .rkey = mr1->rkey},
	};
	post_send(&w, 1);
	mark("complete");
	drain(1);
}

/*
 * 7. rc.inline.send.N and rc.inline.write.N: signalled inline SENDs (each
 * into a posted receive) and inline RDMA writes of N bytes, one SGE each
 * (of length 0 for N = 0).
 */
static const uint32_t inline_lens[5] = {0, 1, 16, 64, 128};

static void scen_inline(void)
{
	for (int i = 0; i < 5; i++) {
		uint32_t n = inline_lens[i];
		mark("step rc.inline.send.%u", n);
		post_recv(recvid(ID_INLINE_SEND + (unsigned)i, 0), 0x6000, 256);
		struct ibv_sge sg = sge0(0x100, n);
		struct ibv_send_wr w = {
			.wr_id = wrid(ID_INLINE_SEND + (unsigned)i, 0),
			.sg_list = &sg,
			.num_sge = 1,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
		};
		post_send(&w, 1);
		mark("complete");
		drain(2);
	}
	for (int i = 0; i < 5; i++) {
		uint32_t n = inline_lens[i];
		mark("step rc.inline.write.%u", n);
		struct ibv_sge sg = sge0(0x200, n);
		struct ibv_send_wr w = write_wr(wrid(ID_INLINE_WRITE + (unsigned)i, 0), &sg, 1, 0x7000);
		w.send_flags |= IBV_SEND_INLINE;
		post_send(&w, 1);
		mark("complete");
		drain(1);
	}
}

/* 8. rc.unsignaled: one post of 4 writes, only the last signalled. */
static void scen_unsignaled(void)
{
	mark("step rc.unsignaled");
	struct ibv_sge sg[4];
	struct ibv_send_wr w[4];
	for (unsigned i = 0; i < 4; i++) {
		sg[i] = sge0(64 * i, 64);
		w[i] = write_wr(wrid(ID_UNSIGNALED, i), &sg[i], 1, 0x8000 + 64 * i);
		if (i < 3)
			w[i].send_flags = 0;
	}
	post_send(w, 4);
	mark("complete");
	drain(1);
}

/* 9a. rc.fence: a signalled write with IBV_SEND_FENCE. */
static void scen_fence(void)
{
	mark("step rc.fence");
	struct ibv_sge sg = sge0(0, 64);
	struct ibv_send_wr w = write_wr(wrid(ID_FENCE, 0), &sg, 1, 0x9000);
	w.send_flags |= IBV_SEND_FENCE;
	post_send(&w, 1);
	mark("complete");
	drain(1);
}

/* 9b. rc.solicited: a signalled SEND with IBV_SEND_SOLICITED. */
static void scen_solicited(void)
{
	mark("step rc.solicited");
	post_recv(recvid(ID_SOLICITED, 0), 0x9100, 256);
	struct ibv_sge sg = sge0(0x20, 16);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_SOLICITED, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
	};
	post_send(&w, 1);
	mark("complete");
	drain(2);
}

/*
 * 10. rc.wrap.K: WRAP_WRITES signalled one-SGE writes of 32 bytes, in
 * posts of WRAP_BATCH, each drained before the next, so the send queue and
 * the CQ wrap (twice, see WRAP_WRITES). One step per batch.
 */
static void scen_wrap(void)
{
	for (unsigned b = 0; b < WRAP_WRITES / WRAP_BATCH; b++) {
		mark("step rc.wrap.%u", b);
		struct ibv_sge sg[WRAP_BATCH];
		struct ibv_send_wr w[WRAP_BATCH];
		for (unsigned i = 0; i < WRAP_BATCH; i++) {
			unsigned k = b * WRAP_BATCH + i;
			sg[i] = sge0(32 * (k % 64), 32);
			w[i] = write_wr(wrid(ID_WRAP, k), &sg[i], 1, 0xa000 + 32 * (k % 64));
		}
		post_send(w, WRAP_BATCH);
		mark("complete");
		drain(WRAP_BATCH);
	}
}

/*
 * 11. rc.full: one post of max_send_wr + 1 signalled 8-byte writes (the
 * granted max_send_wr, not the 64 asked for: see WRAP_WRITES) on the empty
 * queue. The last is refused with ENOMEM; the ones before it are posted.
 */
static void scen_full(void)
{
	mark("step rc.full");
	int n = (int)caps.max_send_wr + 1;
	struct ibv_sge *sg = calloc((size_t)n, sizeof *sg);
	struct ibv_send_wr *w = calloc((size_t)n, sizeof *w);
	if (!sg || !w)
		fail("calloc", ENOMEM);
	for (int i = 0; i < n; i++) {
		sg[i] = sge0(8 * (unsigned)i, 8);
		w[i] = write_wr(wrid(ID_FULL, (unsigned)i), &sg[i], 1, 0xc000 + 8 * (unsigned)i);
		w[i].next = i + 1 < n ? &w[i + 1] : NULL;
	}
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(qp, w, &bad);
	int bad_index = err && bad ? (int)(bad - w) : -1;
	int posted = err ? (bad ? bad_index : 0) : n;
	mark("posted");
	mark("ret post_overflow=%d", err);
	mark("ret bad_wr_index=%d", bad_index);
	free(sg);
	free(w);
	mark("complete");
	drain(posted);
}

/* 12. rc.error: a signalled write that the device completes with WR_FLUSH_ERR. */
static void scen_error(void)
{
	mark("step rc.error");
	struct ibv_sge sg = sge0(0, 64);
	struct ibv_send_wr w = write_wr(wrid(ID_ERROR, 0), &sg, 1, 0xd000);
	post_send(&w, 1);
	mark("complete error=0x05");
	drain(1);
}

/*
 * 13. rc.error.synd.0xSS: every CQE syndrome the drivers decode (enum
 * mlx5_cqe_syndrome), and one they do not (0x7f, which both map to
 * IBV_WC_GENERAL_ERR). A request in error takes its QP to ERR, so each
 * syndrome gets a fresh QP (on the common CQ): one post of two signalled
 * writes; the device fails the first with the syndrome and flushes the
 * second (WR_FLUSH_ERR). The functions below swap the QP the helpers post
 * on (qp) for the step and restore it.
 */
static const uint8_t err_synds[] = {0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11,
				    0x12, 0x13, 0x14, 0x15, 0x16, 0x22, 0x7f};
enum { NSYND = sizeof err_synds / sizeof err_synds[0] };

static void scen_error_synd(void)
{
	struct ibv_qp *main_qp = qp;
	for (unsigned i = 0; i < NSYND; i++) {
		mark("step rc.error.synd.0x%x", err_synds[i]);
		qp = new_qp(IBV_QPT_RC, cq, 0);
		struct ibv_sge sg[2] = {sge0(0, 64), sge0(64, 64)};
		struct ibv_send_wr w[2] = {
			write_wr(wrid(ID_ERROR_SYND, 2 * i), &sg[0], 1, 0xd100),
			write_wr(wrid(ID_ERROR_SYND, 2 * i + 1), &sg[1], 1, 0xd140),
		};
		post_send(w, 2);
		mark("complete error=0x%x", err_synds[i]);
		drain(2);
		destroy_qp(qp);
	}
	qp = main_qp;
}

/*
 * 14. rc.error.recv: a SEND of 64 bytes into a receive of 16 on a fresh
 * QP: the device completes the receive with LOCAL_LENGTH_ERR (a responder
 * error CQE) and the send with REMOTE_INVAL_REQ_ERR.
 */
static void scen_error_recv(void)
{
	mark("step rc.error.recv");
	struct ibv_qp *main_qp = qp;
	qp = new_qp(IBV_QPT_RC, cq, 0);
	post_recv(recvid(ID_ERROR_RECV, 0), 0xd200, 16);
	struct ibv_sge sg = sge0(0, 64);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_ERROR_RECV, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	post_send(&w, 1);
	mark("complete");
	drain(2);
	destroy_qp(qp);
	qp = main_qp;
}

/*
 * 15. cq.arm: a CQ with a completion channel and a fresh QP on it. Arm it
 * (all completions, then solicited only) on the empty CQ, then again after
 * a completion was consumed, so the arm words carry a consumer index; the
 * "posted" after each arm records the CQ doorbell record's arm word and
 * the UAR doorbell. No event is raised (the device does not model EQs).
 */
static void req_notify(int solicited)
{
	int err = ibv_req_notify_cq(cq, solicited);
	if (err)
		fail("req_notify_cq", err);
	mark("posted");
}

static void scen_arm(void)
{
	mark("step cq.arm");
	struct ibv_cq *main_cq = cq;
	struct ibv_qp *main_qp = qp;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!ch)
		fail("create_comp_channel", errno);
	cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	if (!cq)
		fail("create_cq", errno);
	qp = new_qp(IBV_QPT_RC, cq, 0);
	req_notify(0);
	req_notify(1);
	for (unsigned i = 0; i < 3; i++) {
		struct ibv_sge sg = sge0(0, 32);
		struct ibv_send_wr w = write_wr(wrid(ID_ARM, i), &sg, 1, 0xd300);
		post_send(&w, 1);
		mark("complete");
		drain(1);
		req_notify(i & 1);
	}
	destroy_qp(qp);
	int err = ibv_destroy_cq(cq);
	if (err)
		fail("destroy_cq", err);
	if ((err = ibv_destroy_comp_channel(ch)))
		fail("destroy_comp_channel", err);
	cq = main_cq;
	qp = main_qp;
}

/*
 * 16. uc.send, uc.write, uc.write_imm: on a fresh UC QP (on the common
 * CQ), a SEND into a posted receive, an RDMA write, and an RDMA write with
 * immediate consuming a posted receive.
 */
static void scen_uc(void)
{
	mark("step uc.send");
	struct ibv_qp *main_qp = qp;
	qp = new_qp(IBV_QPT_UC, cq, 0);
	post_recv(recvid(ID_UC_SEND, 0), 0xe000, 256);
	struct ibv_sge sg = sge0(0x300, 48);
	struct ibv_send_wr w = {
		.wr_id = wrid(ID_UC_SEND, 0),
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED,
	};
	post_send(&w, 1);
	mark("complete");
	drain(2);

	mark("step uc.write");
	sg = sge0(0x400, 200);
	w = write_wr(wrid(ID_UC_WRITE, 0), &sg, 1, 0xe100);
	post_send(&w, 1);
	mark("complete");
	drain(1);

	mark("step uc.write_imm");
	post_recv(recvid(ID_UC_WRITE_IMM, 0), 0xe200, 256);
	sg = sge0(0x500, 24);
	w = write_wr(wrid(ID_UC_WRITE_IMM, 0), &sg, 1, 0xe300);
	w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w.imm_data = htonl(0x0badcafe);
	post_send(&w, 1);
	mark("complete");
	drain(2);

	destroy_qp(qp);
	qp = main_qp;
}

/*
 * 17. ud.send, ud.send_imm_inline: a UD QP (on the common CQ) and an
 * address handle to port 1's GID 1; libmlx5 asks the kernel (CREATE_AH)
 * for the destination MAC of its address vector. A SEND of 100 bytes, then
 * an inline SEND with immediate of 20, each to the QP itself with its
 * Q_Key, into receives with room for the GRH the device puts first.
 */
static void ud_send(struct ibv_ah *ah, uint64_t id, struct ibv_sge *sg, enum ibv_wr_opcode op,
		    unsigned flags)
{
	struct ibv_send_wr w = {
		.wr_id = id,
		.sg_list = sg,
		.num_sge = 1,
		.opcode = op,
		.send_flags = flags,
		.imm_data = htonl(0x55aa0102),
		.wr.ud = {.ah = ah, .remote_qpn = qp->qp_num, .remote_qkey = UD_QKEY},
	};
	post_send(&w, 1);
}

static void scen_ud(void)
{
	mark("step ud.send");
	struct ibv_qp *main_qp = qp;
	qp = new_qp(IBV_QPT_UD, cq, 0);
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.grh = {.dgid = dgid, .sgid_index = GID_INDEX, .hop_limit = 64},
		.port_num = IB_PORT,
	};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah)
		fail("create_ah", errno);
	post_recv(recvid(ID_UD_SEND, 0), 0xf000, GRH_SIZE + 256);
	struct ibv_sge sg = sge0(0x600, 100);
	ud_send(ah, wrid(ID_UD_SEND, 0), &sg, IBV_WR_SEND, IBV_SEND_SIGNALED);
	mark("complete");
	drain(2);

	mark("step ud.send_imm_inline");
	post_recv(recvid(ID_UD_SEND_IMM, 0), 0xf200, GRH_SIZE + 256);
	sg = sge0(0x700, 20);
	ud_send(ah, wrid(ID_UD_SEND_IMM, 0), &sg, IBV_WR_SEND_WITH_IMM,
		IBV_SEND_SIGNALED | IBV_SEND_INLINE);
	mark("complete");
	drain(2);

	int err = ibv_destroy_ah(ah);
	if (err)
		fail("destroy_ah", err);
	destroy_qp(qp);
	qp = main_qp;
}

/*
 * 18. rc.batch: the ibv_wr_* API (rdmago: QP.BeginSend's SendBatch) on a
 * fresh RC QP: one batch of six requests, posted with one doorbell by
 * ibv_wr_complete: a signalled write of one SGE, an unsignalled send of an
 * SGE list of two, a signalled inline send with immediate, a signalled
 * write with immediate, a signalled read and a signalled fetch-and-add.
 * Three receives take the sends and the write with immediate.
 * rc.batch.abort: a write begun and abandoned (ibv_wr_abort), then a
 * batch of one signalled write: the abandoned one must leave no trace.
 */
static void scen_batch(void)
{
	mark("step rc.batch");
	struct ibv_qp *main_qp = qp;
	/*
	 * Every RC operation rdmago's batch offers (SendBatch has no
	 * per-QP choice), so that libmlx5 sizes the send queue for the
	 * largest of them (a bind) as rdmago does; asking for fewer makes
	 * libmlx5 size its WQEs smaller (sq_overhead without the bind).
	 */
	new_qp_send_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			  IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			  IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV |
			  IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV;
	qp = new_qp(IBV_QPT_RC, cq, 0);
	new_qp_send_ops = 0;
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	if (!x)
		fail("qp_to_qp_ex", EINVAL);
	for (unsigned i = 0; i < 3; i++)
		post_recv(recvid(ID_BATCH, i), 0xf400 + 0x100 * i, 256);

	ibv_wr_start(x);
	x->wr_id = wrid(ID_BATCH, 0);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr1->rkey, remote1(0xf800));
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0 + 0x800, 96);

	x->wr_id = wrid(ID_BATCH, 1);
	x->wr_flags = 0;
	ibv_wr_send(x);
	struct ibv_sge sl[2] = {sge0(0x900, 10), sge0(0x980, 30)};
	ibv_wr_set_sge_list(x, 2, sl);

	x->wr_id = wrid(ID_BATCH, 2);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0x600d1dea));
	ibv_wr_set_inline_data(x, buf0 + 0xa00, 40);

	x->wr_id = wrid(ID_BATCH, 3);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(x, mr1->rkey, remote1(0xfa00), htonl(0x1234abcd));
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0 + 0xb00, 64);

	x->wr_id = wrid(ID_BATCH, 4);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, mr1->rkey, remote1(0xfc00));
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0 + 0xc00, 128);

	x->wr_id = wrid(ID_BATCH, 5);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, mr1->rkey, remote1(0xfe00), 7);
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0 + 0xe00, 8);
	int err = ibv_wr_complete(x);
	if (err)
		fail("wr_complete", err);
	mark("posted");
	mark("complete");
	drain(3 + 5);

	mark("step rc.batch.abort");
	ibv_wr_start(x);
	x->wr_id = wrid(ID_BATCH_ABORT, 0);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr1->rkey, remote1(0xff00));
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0, 16);
	ibv_wr_abort(x);
	ibv_wr_start(x);
	x->wr_id = wrid(ID_BATCH_ABORT, 1);
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr1->rkey, remote1(0xff80));
	ibv_wr_set_sge(x, mr0->lkey, (uintptr_t)buf0 + 0x40, 32);
	if ((err = ibv_wr_complete(x)))
		fail("wr_complete", err);
	mark("posted");
	mark("complete");
	drain(1);

	destroy_qp(qp);
	qp = main_qp;
}

/*
 * 19. srq.round.K: a basic SRQ (max_wr 8, max_sge 2; the granted sizes
 * are marked) and a fresh RC QP receiving from it. SRQ_ROUNDS rounds,
 * each one post of SRQ_PER_ROUND receives (two SGEs each) to the SRQ, then
 * one post of as many signalled SENDs of 48 bytes, drained: more receives
 * than the SRQ has WQEs in all, so WQEs freed by polling are reused
 * through the free list.
 */
static void scen_srq(void)
{
	mark("step srq.round.0");
	struct ibv_qp *main_qp = qp;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 2}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		fail("create_srq", errno);
	mark("ret srq.max_wr=%u", sa.attr.max_wr);
	mark("ret srq.max_sge=%u", sa.attr.max_sge);
	new_qp_srq = srq;
	qp = new_qp(IBV_QPT_RC, cq, 0);
	new_qp_srq = NULL;
	for (unsigned r = 0; r < SRQ_ROUNDS; r++) {
		if (r > 0)
			mark("step srq.round.%u", r);
		struct ibv_sge rs[SRQ_PER_ROUND][2];
		struct ibv_recv_wr rw[SRQ_PER_ROUND];
		for (unsigned i = 0; i < SRQ_PER_ROUND; i++) {
			unsigned k = r * SRQ_PER_ROUND + i;
			rs[i][0] = (struct ibv_sge){.addr = (uintptr_t)buf1 + 0x9400 + 0x40 * i,
						    .length = 16,
						    .lkey = mr1->lkey};
			rs[i][1] = (struct ibv_sge){.addr = (uintptr_t)buf1 + 0x9800 + 0x40 * i,
						    .length = 48,
						    .lkey = mr1->lkey};
			rw[i] = (struct ibv_recv_wr){.wr_id = recvid(ID_SRQ, k),
						     .sg_list = rs[i],
						     .num_sge = 2,
						     .next = i + 1 < SRQ_PER_ROUND ? &rw[i + 1] : NULL};
		}
		struct ibv_recv_wr *bad = NULL;
		int err = ibv_post_srq_recv(srq, rw, &bad);
		if (err)
			fail("post_srq_recv", err);
		mark("posted");
		struct ibv_sge sg[SRQ_PER_ROUND];
		struct ibv_send_wr w[SRQ_PER_ROUND];
		for (unsigned i = 0; i < SRQ_PER_ROUND; i++) {
			unsigned k = r * SRQ_PER_ROUND + i;
			sg[i] = sge0(0x40 * k, 48);
			w[i] = (struct ibv_send_wr){
				.wr_id = wrid(ID_SRQ, k),
				.sg_list = &sg[i],
				.num_sge = 1,
				.opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED,
			};
		}
		post_send(w, SRQ_PER_ROUND);
		mark("complete");
		drain(2 * SRQ_PER_ROUND);
	}
	destroy_qp(qp);
	int err = ibv_destroy_srq(srq);
	if (err)
		fail("destroy_srq", err);
	qp = main_qp;
}

/*
 * 20. xrc.*: XRC, both sides in this process. xrc.setup: a new XRC domain
 * (fd -1), an XRC SRQ on it (max_wr 16, max_sge 1) completing on the
 * setup's CQ, an XRC receive QP in the domain and an XRC send QP (16
 * sends, 2 SGEs, 64 bytes inline) on the setup's PD and CQ, connected to
 * the receive QP; the granted sizes and the SRQ's number are marked.
 * xrc.send: three receives of 64 bytes posted to the SRQ, then one post
 * of a send, a send with immediate and an RDMA write with immediate, each
 * naming the SRQ; drained. xrc.rdma: an RDMA write of two SGEs and an
 * RDMA read through the send QP, which name the SRQ too (every XRC WQE
 * carries it). xrc.teardown: the QPs (moved to ERR first), the SRQ and
 * the domain destroyed.
 */
static void scen_xrc(void)
{
	mark("step xrc.setup");
	struct ibv_qp *main_qp = qp;
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};
	struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &xa);
	if (!xrcd)
		fail("open_xrcd", errno);
	struct ibv_srq_init_attr_ex sa = {
		.attr = {.max_wr = 16, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.xrcd = xrcd,
		.cq = cq,
	};
	struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
	if (!srq)
		fail("create_srq_ex", errno);
	mark("ret srq.max_wr=%u", sa.attr.max_wr);
	mark("ret srq.max_sge=%u", sa.attr.max_sge);
	uint32_t srqn;
	int err = ibv_get_srq_num(srq, &srqn);
	if (err)
		fail("get_srq_num", err);
	mark("ret srq.num=0x%x", srqn);

	struct ibv_qp_init_attr_ex ra = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = xrcd,
	};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ra);
	if (!tgt)
		fail("create_qp_xrc_recv", errno);
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_SEND,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 16, .max_send_sge = 2, .max_inline_data = 64},
	};
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
	if (!ini)
		fail("create_qp_xrc_send", errno);
	mark("ret cap.max_send_wr=%u", ia.cap.max_send_wr);
	mark("ret cap.max_send_sge=%u", ia.cap.max_send_sge);
	mark("ret cap.max_inline_data=%u", ia.cap.max_inline_data);

	/* The transitions with the attributes ib_modify_qp_is_ok asks of each type. */
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = IB_PORT,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	if ((err = ibv_modify_qp(tgt, &a, init)))
		fail("modify_init_tgt", err);
	if ((err = ibv_modify_qp(ini, &a, init)))
		fail("modify_init_ini", err);
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {.is_global = 1,
			    .grh = {.dgid = dgid, .sgid_index = GID_INDEX, .hop_limit = 64},
			    .port_num = IB_PORT},
	};
	int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	rtr.dest_qp_num = ini->qp_num;
	if ((err = ibv_modify_qp(tgt, &rtr, rtr_mask | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		fail("modify_rtr_tgt", err);
	rtr.dest_qp_num = tgt->qp_num;
	if ((err = ibv_modify_qp(ini, &rtr, rtr_mask)))
		fail("modify_rtr_ini", err);
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 1,
	};
	if ((err = ibv_modify_qp(tgt, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN)))
		fail("modify_rts_tgt", err);
	if ((err = ibv_modify_qp(ini, &rts,
				 IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		fail("modify_rts_ini", err);
	qp = ini;

	mark("step xrc.send");
	struct ibv_sge rs[3];
	struct ibv_recv_wr rw[3];
	for (unsigned i = 0; i < 3; i++) {
		rs[i] = (struct ibv_sge){.addr = (uintptr_t)buf1 + 0xa000 + 0x40 * i, .length = 64, .lkey = mr1->lkey};
		rw[i] = (struct ibv_recv_wr){.wr_id = recvid(ID_XRC, i), .sg_list = &rs[i], .num_sge = 1,
					     .next = i < 2 ? &rw[i + 1] : NULL};
	}
	struct ibv_recv_wr *bad = NULL;
	if ((err = ibv_post_srq_recv(srq, rw, &bad)))
		fail("post_srq_recv", err);
	mark("posted");
	struct ibv_sge sg[3] = {sge0(0x100, 48), sge0(0x140, 32), sge0(0x180, 16)};
	struct ibv_send_wr w[3] = {
		{.wr_id = wrid(ID_XRC, 0), .sg_list = &sg[0], .num_sge = 1, .opcode = IBV_WR_SEND,
		 .send_flags = IBV_SEND_SIGNALED},
		{.wr_id = wrid(ID_XRC, 1), .sg_list = &sg[1], .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x11223344)},
		{.wr_id = wrid(ID_XRC, 2), .sg_list = &sg[2], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		 .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x55667788),
		 .wr.rdma = {.remote_addr = remote1(0xa400), .rkey = mr1->rkey}},
	};
	for (int i = 0; i < 3; i++)
		w[i].qp_type.xrc.remote_srqn = srqn;
	post_send(w, 3);
	mark("complete");
	drain(6);

	mark("step xrc.rdma");
	struct ibv_sge ws[2] = {sge0(0x200, 24), sge0(0x240, 40)};
	struct ibv_sge rd = {.addr = (uintptr_t)buf1 + 0xa800, .length = 64, .lkey = mr1->lkey};
	struct ibv_send_wr w2[2] = {
		write_wr(wrid(ID_XRC, 3), ws, 2, 0xa600),
		{.wr_id = wrid(ID_XRC, 4), .sg_list = &rd, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		 .send_flags = IBV_SEND_SIGNALED,
		 .wr.rdma = {.remote_addr = (uintptr_t)buf0 + 0x300, .rkey = mr0->rkey}},
	};
	for (int i = 0; i < 2; i++)
		w2[i].qp_type.xrc.remote_srqn = srqn;
	post_send(w2, 2);
	mark("complete");
	drain(2);

	mark("step xrc.teardown");
	destroy_qp(ini);
	destroy_qp(tgt);
	if ((err = ibv_destroy_srq(srq)))
		fail("destroy_srq", err);
	if ((err = ibv_close_xrcd(xrcd)))
		fail("close_xrcd", err);
	qp = main_qp;
}

/* ---- main ---- */

static const struct {
	const char *name;
	void (*run)(void);
} scenarios[] = {
	{"send", scen_send},
	{"send_imm", scen_send_imm},
	{"write", scen_write},
	{"write_imm", scen_write_imm},
	{"read", scen_read},
	{"atomic", scen_atomic},
	{"inline", scen_inline},
	{"unsignaled", scen_unsignaled},
	{"fence", scen_fence},
	{"solicited", scen_solicited},
	{"wrap", scen_wrap},
	{"full", scen_full},
	{"error", scen_error},
	{"error_synd", scen_error_synd},
	{"error_recv", scen_error_recv},
	{"arm", scen_arm},
	{"uc", scen_uc},
	{"ud", scen_ud},
	{"batch", scen_batch},
	{"srq", scen_srq},
	{"xrc", scen_xrc},
};

enum { NSCEN = sizeof scenarios / sizeof scenarios[0] };

static void usage(void)
{
	fprintf(stderr, "usage: scenario-c SCENARIO (all");
	for (int i = 0; i < NSCEN; i++)
		fprintf(stderr, ", %s", scenarios[i].name);
	fprintf(stderr, ")\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		usage();
	int which = -1;
	if (strcmp(argv[1], "all") != 0) {
		for (int i = 0; i < NSCEN; i++)
			if (strcmp(argv[1], scenarios[i].name) == 0)
				which = i;
		if (which < 0)
			usage();
	}
	setup();
	for (int i = 0; i < NSCEN; i++)
		if (which < 0 || which == i)
			scenarios[i].run();
	teardown();
	mark("end");
	return 0;
}
