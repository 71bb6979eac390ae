/*
 * bench.c: the C side of make bench-mlx5. It builds and posts one WQE the
 * way rdma-core v44's providers/mlx5 does for ibv_post_send of a single
 * signaled RDMA write with one SGE (qp.c _mlx5_post_send and
 * post_send_db), with mlx5dv.h's helpers for the control and data
 * segments, and rings the doorbell to a plain memory page standing in for
 * the UAR: doorbell record, then a BlueFlame copy of the WQE, with the
 * barriers rdma-core uses (util/udma_barrier.h, util/mmio.h). Every 32
 * posts the send queue is emptied, as a poll of 32 completions would. This
 * is the work
 * BenchmarkPostSend in provider/mlx5 measures; the SQ and QP sizes are the
 * ones the Go provider computes for the same QP (64 requests, 1 SGE).
 *
 * Output: "ns/op <value>" on stdout.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#if defined(__x86_64__)
#define udma_to_device_barrier() asm volatile("" ::: "memory")
#define mmio_flush_writes() asm volatile("sfence" ::: "memory")
#elif defined(__aarch64__)
#define udma_to_device_barrier() asm volatile("dsb st" ::: "memory")
#define mmio_flush_writes() asm volatile("dsb st" ::: "memory")
#else
#error "bench.c: x86-64 or aarch64"
#endif
#define mmio_wc_start() mmio_flush_writes()

struct wq {
	uint64_t *wrid;
	unsigned *wqe_head;
	unsigned wqe_cnt, max_post, head, tail, cur_post;
	int max_gs;
};

struct bf {
	void *reg;
	unsigned offset, buf_size, uuarn;
};

struct qp {
	pthread_spinlock_t lock;
	struct wq sq;
	void *sq_start, *qend;
	volatile __be32 *db;
	struct bf *bf;
	uint32_t qpn;
	uint8_t sq_signal_bits, fm_cache;
	int prefer_bf;
};

struct sge {
	uint64_t addr;
	uint32_t length, lkey;
};

struct send_wr {
	uint64_t wr_id;
	struct sge *sg_list;
	int num_sge;
	int opcode;
	unsigned send_flags;
	uint32_t imm_data;
	uint64_t remote_addr;
	uint32_t rkey;
};

static void mmio_write64(void *dst, uint64_t v)
{
	*(volatile uint64_t *)dst = v;
}

/* mmio_memcpy_x64, generic 64-bit version (what x86-64 uses) */
static void mmio_memcpy_x64(void *dest, const void *src, size_t bytecnt)
{
	volatile uint64_t *d = dest;
	const uint64_t *s = src;

	do {
		d[0] = s[0];
		d[1] = s[1];
		d[2] = s[2];
		d[3] = s[3];
		d[4] = s[4];
		d[5] = s[5];
		d[6] = s[6];
		d[7] = s[7];
		d += 8;
		s += 8;
		bytecnt -= 64;
	} while (bytecnt > 0);
}

static __attribute__((noinline)) int post_send(struct qp *qp, struct send_wr *wr)
{
	struct mlx5_wqe_ctrl_seg *ctrl = NULL;
	int nreq, size = 0, err = 0, inl = 0;
	void *seg;
	unsigned idx;

	pthread_spin_lock(&qp->lock);
	for (nreq = 0; wr; ++nreq, wr = NULL) {
		uint8_t fence;

		if (qp->sq.head - qp->sq.tail + nreq >= qp->sq.max_post) {
			err = 12;
			break;
		}
		if (wr->num_sge > qp->sq.max_gs) {
			err = 12;
			break;
		}
		fence = (wr->send_flags & IBV_SEND_FENCE) ? MLX5_WQE_CTRL_FENCE : qp->fm_cache;
		idx = qp->sq.cur_post & (qp->sq.wqe_cnt - 1);
		ctrl = seg = (uint8_t *)qp->sq_start + (idx << MLX5_SEND_WQE_SHIFT);
		*(uint32_t *)((uint8_t *)seg + 8) = 0;
		seg = (uint8_t *)seg + sizeof(*ctrl);
		size = sizeof(*ctrl) / 16;
		{
			struct mlx5_wqe_raddr_seg *r = seg;

			r->raddr = htobe64(wr->remote_addr);
			r->rkey = htobe32(wr->rkey);
			r->reserved = 0;
			seg = r + 1;
			size += sizeof(*r) / 16;
		}
		{
			struct mlx5_wqe_data_seg *d = seg;

			for (int i = 0; i < wr->num_sge; i++) {
				if ((void *)d == qp->qend)
					d = qp->sq_start;
				if (!wr->sg_list[i].length)
					continue;
				mlx5dv_set_data_seg(d, wr->sg_list[i].length, wr->sg_list[i].lkey,
						    (uintptr_t)wr->sg_list[i].addr);
				d++;
				size++;
			}
		}
		mlx5dv_set_ctrl_seg(ctrl, qp->sq.cur_post & 0xffff, MLX5_OPCODE_RDMA_WRITE, 0, qp->qpn,
				    qp->sq_signal_bits | fence |
					    ((wr->send_flags & IBV_SEND_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
					    ((wr->send_flags & IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0),
				    (uint8_t)size, 0, 0);
		qp->sq.wrid[idx] = wr->wr_id;
		qp->sq.wqe_head[idx] = qp->sq.head + nreq;
		qp->sq.cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	}
	qp->fm_cache = 0;
	if (nreq) { /* post_send_db */
		struct bf *bf = qp->bf;

		qp->sq.head += nreq;
		udma_to_device_barrier();
		qp->db[MLX5_SND_DBR] = htobe32(qp->sq.cur_post & 0xffff);
		mmio_wc_start();
		if (nreq == 1 && bf->uuarn && (inl || qp->prefer_bf) && size > 1 && size <= (int)bf->buf_size / 16) {
			uint64_t *dst = (uint64_t *)((uint8_t *)bf->reg + bf->offset), *src = (uint64_t *)ctrl;
			int bytecnt = (size * 16 + 63) & ~63;

			do {
				mmio_memcpy_x64(dst, src, 64);
				bytecnt -= 64;
				dst += 8;
				src += 8;
				if (src == qp->qend)
					src = qp->sq_start;
			} while (bytecnt > 0);
		} else {
			mmio_write64((uint8_t *)bf->reg + bf->offset, *(uint64_t *)ctrl);
		}
		mmio_flush_writes();
		bf->offset ^= bf->buf_size;
	}
	pthread_spin_unlock(&qp->lock);
	return err;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 50000000;
	/* RC, 64 requests of 1 SGE: 256-byte WQEs (room for a memory-window
	 * bind), a 16 KiB ring of 256 BBs, 64 requests outstanding at most. */
	unsigned wqe_cnt = 256;
	void *buf = mmap(NULL, wqe_cnt * 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *dbpage = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *uar = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct bf bf = { (uint8_t *)uar + 0x800 + 512, 0, 256, 1 };
	struct qp qp = { 0 };
	struct sge sge = { 0x10000, 64, 0x1234 };
	struct send_wr wr = { 1, &sge, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, 0, 0x7f0000001000ull, 0x5678 };
	struct timespec t0, t1;

	if (buf == MAP_FAILED || dbpage == MAP_FAILED || uar == MAP_FAILED)
		return 1;
	pthread_spin_init(&qp.lock, PTHREAD_PROCESS_PRIVATE);
	qp.sq.wrid = calloc(wqe_cnt, sizeof(uint64_t));
	qp.sq.wqe_head = calloc(wqe_cnt, sizeof(unsigned));
	qp.sq.wqe_cnt = wqe_cnt;
	qp.sq.max_post = 64;
	qp.sq.max_gs = 1;
	qp.sq_start = buf;
	qp.qend = (uint8_t *)buf + wqe_cnt * 64;
	qp.db = dbpage;
	qp.bf = &bf;
	qp.qpn = 0x123;
	qp.prefer_bf = 1;

	for (long i = 0; i < iters / 10; i++) { /* warm up */
		post_send(&qp, &wr);
		if ((i & 31) == 31)
			qp.sq.tail = qp.sq.head;
	}
	qp.sq.tail = qp.sq.head;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < iters; i++) {
		if (post_send(&qp, &wr))
			return 2;
		if ((i & 31) == 31)
			qp.sq.tail = qp.sq.head; /* as a poll of 32 would */
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("ns/op %.2f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)iters);
	return 0;
}
