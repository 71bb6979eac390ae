/*
 * bench.c: the C half of mlx5cmp's speed anchor. It times rdma-core's
 * unmodified libibverbs + libmlx5 posting and polling on mlx5_0 under
 * mlx5cmp's fake mlx5 kernel: only the calls ibv_post_send and
 * ibv_poll_cq, nothing of the fake device's work, which runs in the
 * supervisor while the program is stopped in a marker's write.
 *
 * Its Go twin is hack/mlx5cmp/scenario/gobench/main.go: the same setup (the
 * setup and teardown of rc.c, copied), the same requests, the same loop,
 * the same output. Change one and you must change the other.
 *
 *   gcc -O2 -Wall -Wextra -o bin/mlx5cmp/bench-c hack/mlx5cmp/scenario/bench.c -libverbs
 *   cd hack/mlx5cmp && mlx5cmp run -profile testdata/cx6.json -o /dev/null -- bench-c 20000
 *
 * Usage: bench-c N [K]. N signalled RDMA writes of 64 bytes with one SGE,
 * posted one per ibv_post_send (a single WQE of one basic block: libmlx5
 * copies it to the BlueFlame register, as for perftest's ib_write_bw);
 * after every K of them (default 64, at most the granted max_send_wr) the
 * program writes "posted" and "complete" to the marker descriptor, so the
 * fake device records and executes the K requests and writes K CQEs, and
 * then polls them, POLL_BATCH at a time (perftest's ctx_poll). One round of
 * K untimed comes first. N is rounded down to a multiple of K.
 *
 * Timed: clock_gettime(CLOCK_MONOTONIC) (the vDSO) before and after each
 * ibv_post_send, and each ibv_poll_cq that returns completions; the sums
 * are divided by the posts and by the completions. clock_ns is what an
 * empty interval (two clock reads back to back) measures, included once in
 * every timed post and every timed poll; subtract it for the calls alone.
 * In the project's VM under the instruction-counting clock (vm run
 * --icount) a nanosecond is a guest instruction, so the figures count
 * instructions. Output, on stdout:
 *
 *   bench post_ns_per_call=P poll_ns_per_completion=C n=N polls=Q clock_ns=E
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

enum {
	MARK_FD = 899,
	BUF_SIZE = 64 * 1024,
	CQ_SIZE = 256,
	POLL_BATCH = 16,
	MAX_POLLS = 100,
	IB_PORT = 1,
	GID_INDEX = 1,
	MSG_SIZE = 64,
	DEFAULT_K = 64,
	CLOCK_PAIRS = 10000,
};

/* The objects of the common setup. */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint8_t *buf0, *buf1;
static struct ibv_mr *mr0, *mr1;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_qp_cap caps; /* as granted */

/* ---- markers ---- */

/*
 * mark writes one marker line to MARK_FD. Outside mlx5cmp the descriptor
 * does not exist: say so and exit 2.
 */
__attribute__((format(printf, 1, 2))) static void mark(const char *format, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, format);
	int n = vsnprintf(line, sizeof line, format, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof line) {
		fprintf(stderr, "bench-c: marker too long\n");
		exit(1);
	}
	ssize_t w = write(MARK_FD, line, (size_t)n);
	if (w != n) {
		if (w < 0 && errno == EBADF)
			fprintf(stderr, "bench-c: marker descriptor %d does not exist: "
					"run me under mlx5cmp (mlx5cmp run ... -- bench-c N)\n",
				MARK_FD);
		else
			fprintf(stderr, "bench-c: marker write: %s\n", strerror(errno));
		exit(2);
	}
}

/* fail reports an unexpected failure of call name with errno err, then exits 1. */
static void fail(const char *name, int err)
{
	mark("ret %s=%d", name, err);
	fprintf(stderr, "bench-c: %s: %s\n", name, strerror(err));
	exit(1);
}

/* ---- setup and teardown (rc.c's) ---- */

static void setup(void)
{
	mark("step setup");

	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0) {
		fprintf(stderr, "scenario-c: no RDMA device\n");
		exit(2);
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < num; i++)
		if (strcmp(ibv_get_device_name(list[i]), "mlx5_0") == 0)
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "scenario-c: no device mlx5_0\n");
		exit(2);
	}
	ctx = ibv_open_device(dev);
	if (!ctx) {
		fprintf(stderr, "scenario-c: open mlx5_0: %s\n", strerror(errno));
		exit(2);
	}
	ibv_free_device_list(list);

	/*
	 * The GID: Go has one call, Context.QueryGIDTable, which queries the
	 * device, each port, then the whole table sized by the ports'
	 * gid_tbl_len. Do the same here (rather than ibv_query_gid, which has
	 * no Go counterpart).
	 */
	struct ibv_device_attr_ex dattr;
	int err = ibv_query_device_ex(ctx, NULL, &dattr);
	if (err)
		fail("query_device", err);
	size_t max = 0;
	for (int p = 1; p <= dattr.orig_attr.phys_port_cnt; p++) {
		struct ibv_port_attr pattr;
		err = ibv_query_port(ctx, (uint8_t)p, &pattr);
		if (err)
			fail("query_port", err);
		max += (size_t)pattr.gid_tbl_len;
	}
	struct ibv_gid_entry *ents = calloc(max ? max : 1, sizeof *ents);
	if (!ents)
		fail("calloc", ENOMEM);
	ssize_t nent = ibv_query_gid_table(ctx, ents, max, 0);
	if (nent < 0)
		fail("query_gid_table", (int)-nent);
	union ibv_gid dgid = {0};
	int found = 0;
	for (ssize_t i = 0; i < nent; i++)
		if (ents[i].port_num == IB_PORT && ents[i].gid_index == GID_INDEX) {
			dgid = ents[i].gid;
			found = 1;
		}
	free(ents);
	if (!found)
		fail("gid_index_1", ENOENT);

	pd = ibv_alloc_pd(ctx);
	if (!pd)
		fail("alloc_pd", errno);

	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	buf0 = aligned_alloc((size_t)sysconf(_SC_PAGESIZE), BUF_SIZE);
	buf1 = aligned_alloc((size_t)sysconf(_SC_PAGESIZE), BUF_SIZE);
	if (!buf0 || !buf1)
		fail("alloc", ENOMEM);
	memset(buf0, 0, BUF_SIZE);
	memset(buf1, 0, BUF_SIZE);
	mr0 = ibv_reg_mr(pd, buf0, BUF_SIZE, access);
	if (!mr0)
		fail("reg_mr0", errno);
	mr1 = ibv_reg_mr(pd, buf1, BUF_SIZE, access);
	if (!mr1)
		fail("reg_mr1", errno);
	for (int i = 0; i < BUF_SIZE; i++)
		buf0[i] = (uint8_t)(i * 7 + 3);

	cq = ibv_create_cq(ctx, CQ_SIZE, NULL, NULL, 0);
	if (!cq)
		fail("create_cq", errno);

	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 4,
			.max_inline_data = 128},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	qp = ibv_create_qp(pd, &init);
	if (!qp)
		fail("create_qp", errno);
	caps = init.cap;
	mark("ret cap.max_send_wr=%u", caps.max_send_wr);
	mark("ret cap.max_recv_wr=%u", caps.max_recv_wr);
	mark("ret cap.max_send_sge=%u", caps.max_send_sge);
	mark("ret cap.max_recv_sge=%u", caps.max_recv_sge);
	mark("ret cap.max_inline_data=%u", caps.max_inline_data);

	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = IB_PORT,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	err = ibv_modify_qp(qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err)
		fail("modify_init", err);

	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = qp->qp_num,
		.rq_psn = 0,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr =
			{
				.is_global = 1,
				.grh = {.dgid = dgid, .sgid_index = GID_INDEX, .hop_limit = 64},
				.port_num = IB_PORT,
			},
	};
	err = ibv_modify_qp(qp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
	if (err)
		fail("modify_rtr", err);

	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTS,
		.sq_psn = 0,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = 1,
	};
	err = ibv_modify_qp(qp, &a,
			    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (err)
		fail("modify_rts", err);
}

static void teardown(void)
{
	mark("step teardown");
	/*
	 * Move the QP to ERR first: Go's QP.Close does that itself for a QP
	 * not in RESET or ERR (so that outstanding requests flush), which
	 * ibv_destroy_qp does not. Doing it explicitly on both sides keeps
	 * the command sequences the same (Go's Close then skips it).
	 */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (err)
		fail("modify_err", err);
	if ((err = ibv_destroy_qp(qp)))
		fail("destroy_qp", err);
	if ((err = ibv_destroy_cq(cq)))
		fail("destroy_cq", err);
	if ((err = ibv_dereg_mr(mr0)))
		fail("dereg_mr0", err);
	if ((err = ibv_dereg_mr(mr1)))
		fail("dereg_mr1", err);
	free(buf0);
	free(buf1);
	if ((err = ibv_dealloc_pd(pd)))
		fail("dealloc_pd", err);
	if ((err = ibv_close_device(ctx)))
		fail("close_device", errno);
}

/* ---- the benchmark ---- */

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The totals of the timed rounds. */
static int64_t post_ns, poll_ns, polls, completions;

/*
 * round posts k writes one at a time, has the device execute them, and
 * polls their k completions; with timed set it adds to the totals.
 */
static void round_k(struct ibv_send_wr *w, int k, int timed)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc[POLL_BATCH];
	for (int i = 0; i < k; i++) {
		w->wr_id = (uint64_t)i;
		int64_t t0 = now();
		int err = ibv_post_send(qp, w, &bad);
		int64_t t1 = now();
		if (err)
			fail("post_send", err);
		if (timed)
			post_ns += t1 - t0;
	}
	mark("posted");
	mark("complete");
	int got = 0;
	for (int p = 0; got < k; p++) {
		if (p == MAX_POLLS)
			fail("poll_timeout", ETIMEDOUT);
		int64_t t0 = now();
		int n = ibv_poll_cq(cq, POLL_BATCH, wc);
		int64_t t1 = now();
		if (n < 0)
			fail("poll_cq", EIO);
		if (n == 0)
			continue;
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RDMA_WRITE ||
			    wc[i].wr_id != (uint64_t)(got + i))
				fail("wc", EIO);
		got += n;
		if (timed) {
			poll_ns += t1 - t0;
			polls++;
			completions += n;
		}
	}
}

/* clock_cost returns the mean of CLOCK_PAIRS empty intervals. */
static double clock_cost(void)
{
	int64_t sum = 0;
	for (int i = 0; i < CLOCK_PAIRS; i++) {
		int64_t t0 = now();
		int64_t t1 = now();
		sum += t1 - t0;
	}
	return (double)sum / CLOCK_PAIRS;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-c N [K]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3)
		usage();
	char *end;
	long n = strtol(argv[1], &end, 10);
	if (*end || n <= 0)
		usage();
	long k = DEFAULT_K;
	if (argc == 3) {
		k = strtol(argv[2], &end, 10);
		if (*end || k <= 0 || k > CQ_SIZE)
			usage();
	}
	setup();
	if ((unsigned long)k > caps.max_send_wr) {
		fprintf(stderr, "bench-c: K %ld is more than max_send_wr %u\n", k, caps.max_send_wr);
		exit(2);
	}
	mark("step bench");
	struct ibv_sge sg = {.addr = (uintptr_t)buf0, .length = MSG_SIZE, .lkey = mr0->lkey};
	struct ibv_send_wr w = {
		.sg_list = &sg,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = (uintptr_t)mr1->addr, .rkey = mr1->rkey},
	};
	round_k(&w, (int)k, 0);
	long rounds = n / k;
	for (long r = 0; r < rounds; r++)
		round_k(&w, (int)k, 1);
	double clk = clock_cost();
	long posts = rounds * k;
	if (posts == 0)
		usage();
	printf("bench post_ns_per_call=%.1f poll_ns_per_completion=%.1f n=%ld polls=%" PRId64
	       " clock_ns=%.1f\n",
	       (double)post_ns / (double)posts, (double)poll_ns / (double)completions, posts, polls,
	       clk);
	fflush(stdout);
	teardown();
	mark("end");
	return 0;
}
