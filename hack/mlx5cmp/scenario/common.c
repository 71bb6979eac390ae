/*
 * common.c: what mlx5cmp's C scenario programs (rc.c, random.c, bench.c)
 * share (see common.h): the markers, the common setup and teardown and
 * the completion lines, on rdma-core's unmodified libibverbs + libmlx5.
 *
 * Its Go twin is hack/mlx5cmp/scenario/scen: the functions have the same
 * names (in Go case) and order in both, so they can be compared by eye.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "common.h"

/* Values the Go side (package scen) uses as literals; checked here against verbs.h. */
_Static_assert(IBV_WC_SUCCESS == 0 && IBV_WC_WR_FLUSH_ERR == 5 && IBV_WC_GENERAL_ERR == 21 &&
		       IBV_WC_TM_ERR == 22 && IBV_WC_TM_RNDV_INCOMPLETE == 23,
	       "ibv_wc_status");
_Static_assert(IBV_WC_SEND == 0 && IBV_WC_RDMA_WRITE == 1 && IBV_WC_RDMA_READ == 2 &&
		       IBV_WC_COMP_SWAP == 3 && IBV_WC_FETCH_ADD == 4 && IBV_WC_BIND_MW == 5 &&
		       IBV_WC_LOCAL_INV == 6 && IBV_WC_TSO == 7 && IBV_WC_RECV == 128 &&
		       IBV_WC_RECV_RDMA_WITH_IMM == 129,
	       "ibv_wc_opcode");
_Static_assert(IBV_WC_GRH == 1 && IBV_WC_WITH_IMM == 2 && IBV_WC_IP_CSUM_OK == 4 &&
		       IBV_WC_WITH_INV == 8,
	       "ibv_wc_flags");
_Static_assert(ETIMEDOUT == 110, "errno");

/* The objects of the common setup. */
struct ibv_context *ctx;
struct ibv_pd *pd;
uint8_t *buf0, *buf1;
struct ibv_mr *mr0, *mr1;
struct ibv_cq *cq;
struct ibv_qp *qp;
struct ibv_qp_cap caps;
union ibv_gid dgid;
uint64_t new_qp_send_ops;
struct ibv_srq *new_qp_srq;

/* ---- markers ---- */

/*
 * mark writes one marker line to MARK_FD. Outside mlx5cmp the descriptor
 * does not exist: say so and exit 2.
 */
void mark(const char *format, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, format);
	int n = vsnprintf(line, sizeof line, format, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof line) {
		fprintf(stderr, "%s: marker too long\n", prog_name);
		exit(1);
	}
	ssize_t w = write(MARK_FD, line, (size_t)n);
	if (w != n) {
		if (w < 0 && errno == EBADF)
			fprintf(stderr, "%s: marker descriptor %d does not exist: "
					"run me under mlx5cmp (mlx5cmp run ... -- %s %s)\n",
				prog_name, MARK_FD, prog_name, prog_args);
		else
			fprintf(stderr, "%s: marker write: %s\n", prog_name, strerror(errno));
		exit(2);
	}
}

/* fail reports an unexpected failure of call name with errno err, then exits 1. */
void fail(const char *name, int err)
{
	mark("ret %s=%d", name, err);
	fprintf(stderr, "%s: %s: %s\n", prog_name, name, strerror(err));
	exit(1);
}

/* ---- completions ---- */

/*
 * wc_imm returns imm_data as ibv_wc carries it: the raw __be32 read as a
 * host uint32 (see rc.c's top comment).
 */
uint32_t wc_imm(const struct ibv_wc *wc)
{
	return wc->imm_data;
}

/* emit_wc marks one completion: ibv_wc's fields, with ibv_wc's numeric values. */
void emit_wc(const struct ibv_wc *wc)
{
	mark("wc wr_id=0x%" PRIx64 " status=%d opcode=%d vendor_err=0x%x byte_len=%u imm=0x%x "
	     "qp_num=%u src_qp=%u wc_flags=0x%x pkey_index=%u slid=%u sl=%u dlid_path_bits=%u",
	     wc->wr_id, (int)wc->status, (int)wc->opcode, wc->vendor_err, wc->byte_len, wc_imm(wc),
	     wc->qp_num, wc->src_qp, (unsigned)wc->wc_flags, wc->pkey_index, wc->slid, wc->sl,
	     wc->dlid_path_bits);
}

/* ---- setup and teardown ---- */

/*
 * new_qp creates an RC, UC or UD QP on CQ c with the setup's capabilities
 * and takes it to RTS, an RC or UC QP connected to itself (the device
 * loops it back). With report set it records the granted capabilities in
 * caps and marks them. Each type is given only the attributes it takes
 * (ib_modify_qp_is_ok): UC remote write access and no RDMA read/atomic or
 * retry attributes; UD a Q_Key at INIT and nothing but the state (and the
 * SQ PSN) after. new_qp_send_ops and new_qp_srq (common.h) adjust the
 * creation.
 */
struct ibv_qp *new_qp(enum ibv_qp_type type, struct ibv_cq *c, int report)
{
	int err;
	int rc = type == IBV_QPT_RC, ud = type == IBV_QPT_UD;
	struct ibv_qp_init_attr init = {
		.send_cq = c,
		.recv_cq = c,
		.cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 4,
			.max_inline_data = 128},
		.qp_type = type,
		.sq_sig_all = 0,
		.srq = new_qp_srq,
	};
	struct ibv_qp *q;
	if (new_qp_send_ops) {
		struct ibv_qp_init_attr_ex ex = {
			.send_cq = init.send_cq,
			.recv_cq = init.recv_cq,
			.cap = init.cap,
			.qp_type = init.qp_type,
			.sq_sig_all = init.sq_sig_all,
			.srq = init.srq,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.pd = pd,
			.send_ops_flags = new_qp_send_ops,
		};
		q = ibv_create_qp_ex(ctx, &ex);
		init.cap = ex.cap;
	} else {
		q = ibv_create_qp(pd, &init);
	}
	if (!q)
		fail("create_qp", errno);
	if (report) {
		caps = init.cap;
		mark("ret cap.max_send_wr=%u", caps.max_send_wr);
		mark("ret cap.max_recv_wr=%u", caps.max_recv_wr);
		mark("ret cap.max_send_sge=%u", caps.max_send_sge);
		mark("ret cap.max_recv_sge=%u", caps.max_recv_sge);
		mark("ret cap.max_inline_data=%u", caps.max_inline_data);
	}

	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = IB_PORT,
		.qp_access_flags = rc ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						IBV_ACCESS_REMOTE_ATOMIC
				      : IBV_ACCESS_REMOTE_WRITE,
		.qkey = UD_QKEY,
	};
	err = ibv_modify_qp(q, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
	if (err)
		fail("modify_init", err);

	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = q->qp_num,
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
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ud)
		mask = IBV_QP_STATE;
	err = ibv_modify_qp(q, &a, mask);
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
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	err = ibv_modify_qp(q, &a, mask);
	if (err)
		fail("modify_rts", err);
	return q;
}

/*
 * destroy_qp moves q to ERR, then destroys it. Go's QP.Close moves a QP
 * not in RESET or ERR to ERR itself (so that outstanding requests flush),
 * which ibv_destroy_qp does not. Doing it explicitly on both sides keeps
 * the command sequences the same (Go's Close then skips it).
 */
void destroy_qp(struct ibv_qp *q)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int err = ibv_modify_qp(q, &a, IBV_QP_STATE);
	if (err)
		fail("modify_err", err);
	if ((err = ibv_destroy_qp(q)))
		fail("destroy_qp", err);
}

/*
 * setup opens mlx5_0, finds port 1's GID 1, allocates a PD, two buffers of
 * BUF_SIZE registered with every access (buffer 0 filled with
 * (i * 7 + 3) & 0xff, buffer 1 zeroed), a CQ of CQ_SIZE and an RC QP
 * connected to itself, whose granted capabilities it marks.
 */
void setup(void)
{
	mark("step setup");

	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0) {
		fprintf(stderr, "%s: no RDMA device\n", prog_name);
		exit(2);
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < num; i++)
		if (strcmp(ibv_get_device_name(list[i]), "mlx5_0") == 0)
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "%s: no device mlx5_0\n", prog_name);
		exit(2);
	}
	ctx = ibv_open_device(dev);
	if (!ctx) {
		fprintf(stderr, "%s: open mlx5_0: %s\n", prog_name, strerror(errno));
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

	qp = new_qp(IBV_QPT_RC, cq, 1);
}

/* teardown destroys the setup's objects, the QP moved to ERR first (destroy_qp). */
void teardown(void)
{
	mark("step teardown");
	destroy_qp(qp);
	int err;
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
