/*
 * gen.c writes provider/mlx5/zvectors_test.go: golden vectors for the
 * mlx5 provider, built with rdma-core's own mlx5dv.h (the structures of
 * the device's formats and its inline helpers: mlx5dv_set_ctrl_seg,
 * mlx5dv_set_data_seg, mlx5dv_set_dgram_seg, mlx5_cqe64 with
 * mlx5dv_get_cqe_owner/opcode/se/format, mlx5dv_ts_to_ns) and libibverbs' verbs.h (the
 * numeric values of work request opcodes, flags, completion opcodes and
 * statuses).
 *
 * mlx5dv.h has no helper for the remote-address, atomic and inline
 * segments; those are filled through their structures. Where a whole WQE
 * or a decoded completion is produced, this program follows rdma-core
 * v44's providers/mlx5 (qp.c _mlx5_post_send and mlx5_post_recv, srq.c
 * mlx5_post_srq_recv, cq.c mlx5_parse_cqe, verbs.c queue sizing and
 * mlx5_create_ah), written independently of the Go implementation so the
 * Go tests compare two implementations that share only rdma-core's rules.
 *
 * Build and run: hack/mlx5gen/generate.sh (make generate-mlx5). Plain C,
 * compiled with the host gcc against the installed libibverbs-dev headers;
 * nothing is linked but libc. The output depends only on those headers'
 * layouts and enum values.
 */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

/* ---------- output helpers ---------- */

/* bytes prints a Go byte array literal, byteslice a byte slice literal. */
static void hexlist(const void *p, size_t n)
{
	const uint8_t *b = p;

	printf("{");
	for (size_t i = 0; i < n; i++)
		printf("%s0x%02x", i ? ", " : "", b[i]);
	printf("}");
}

static void bytes(const void *p, size_t n)
{
	printf("[%zu]byte", n);
	hexlist(p, n);
}

static void byteslice(const void *p, size_t n)
{
	printf("[]byte");
	hexlist(p, n);
}

/* prefill fills a buffer with a pattern, so a vector also shows which
 * bytes an operation leaves untouched. */
static void prefill(void *p, size_t n, unsigned seed)
{
	uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + seed);
}

/* ---------- layout ---------- */

static void offsets(void)
{
#define OFF(name, type, field) printf("\t{%-28s %zu},\n", "\"" name "\",", offsetof(type, field))
#define SIZE(name, type) printf("\t{%-28s %zu},\n", "\"" name "\",", sizeof(type))
	printf("// layout is the size or offset of each format field the provider\n"
	       "// uses, from mlx5dv.h's structures.\n"
	       "var layout = []struct {\n\tname  string\n\tvalue uintptr\n}{\n");
	SIZE("sizeof ctrl", struct mlx5_wqe_ctrl_seg);
	SIZE("sizeof raddr", struct mlx5_wqe_raddr_seg);
	SIZE("sizeof atomic", struct mlx5_wqe_atomic_seg);
	SIZE("sizeof data", struct mlx5_wqe_data_seg);
	SIZE("sizeof datagram", struct mlx5_wqe_datagram_seg);
	SIZE("sizeof inline", struct mlx5_wqe_inl_data_seg);
	SIZE("sizeof srq next", struct mlx5_wqe_srq_next_seg);
	SIZE("sizeof umr ctrl", struct mlx5_wqe_umr_ctrl_seg);
	SIZE("sizeof mkey context", struct mlx5_wqe_mkey_context_seg);
	SIZE("sizeof umr klm", struct mlx5_wqe_umr_klm_seg);
	SIZE("sizeof cqe64", struct mlx5_cqe64);
	SIZE("sizeof err cqe", struct mlx5_err_cqe);
	OFF("cqe64.ml_path", struct mlx5_cqe64, ml_path);
	OFF("cqe64.slid", struct mlx5_cqe64, slid);
	OFF("cqe64.flags_rqpn", struct mlx5_cqe64, flags_rqpn);
	OFF("cqe64.srqn_uidx", struct mlx5_cqe64, srqn_uidx);
	OFF("cqe64.imm_inval_pkey", struct mlx5_cqe64, imm_inval_pkey);
	OFF("cqe64.byte_cnt", struct mlx5_cqe64, byte_cnt);
	OFF("cqe64.timestamp", struct mlx5_cqe64, timestamp);
	OFF("cqe64.sop_drop_qpn", struct mlx5_cqe64, sop_drop_qpn);
	OFF("cqe64.wqe_counter", struct mlx5_cqe64, wqe_counter);
	OFF("cqe64.signature", struct mlx5_cqe64, signature);
	OFF("cqe64.op_own", struct mlx5_cqe64, op_own);
	OFF("err_cqe.vendor_err_synd", struct mlx5_err_cqe, vendor_err_synd);
	OFF("err_cqe.syndrome", struct mlx5_err_cqe, syndrome);
	OFF("av.dqp_dct", struct mlx5_wqe_av, dqp_dct);
	OFF("av.stat_rate_sl", struct mlx5_wqe_av, stat_rate_sl);
	OFF("av.fl_mlid", struct mlx5_wqe_av, fl_mlid);
	OFF("av.rlid", struct mlx5_wqe_av, rlid);
	OFF("av.rmac", struct mlx5_wqe_av, rmac);
	OFF("av.tclass", struct mlx5_wqe_av, tclass);
	OFF("av.hop_limit", struct mlx5_wqe_av, hop_limit);
	OFF("av.grh_gid_fl", struct mlx5_wqe_av, grh_gid_fl);
	OFF("av.rgid", struct mlx5_wqe_av, rgid);
	printf("}\n\n");
	printf("// constants are mlx5dv.h's values of the format constants.\n"
	       "var constants = []struct {\n\tname  string\n\tvalue uint64\n}{\n");
#define CONST(c) printf("\t{%-34s %#llx},\n", "\"" #c "\",", (unsigned long long)(c))
	CONST(MLX5_OPCODE_SEND);
	CONST(MLX5_OPCODE_SEND_IMM);
	CONST(MLX5_OPCODE_SEND_INVAL);
	CONST(MLX5_OPCODE_RDMA_WRITE);
	CONST(MLX5_OPCODE_RDMA_WRITE_IMM);
	CONST(MLX5_OPCODE_RDMA_READ);
	CONST(MLX5_OPCODE_ATOMIC_CS);
	CONST(MLX5_OPCODE_ATOMIC_FA);
	CONST(MLX5_OPCODE_TSO);
	CONST(MLX5_WQE_CTRL_CQ_UPDATE);
	CONST(MLX5_WQE_CTRL_SOLICITED);
	CONST(MLX5_WQE_CTRL_FENCE);
	CONST(MLX5_SEND_WQE_BB);
	CONST(MLX5_INLINE_SEG);
	CONST(MLX5_INVALID_LKEY);
	CONST(MLX5_EXTENDED_UD_AV);
	CONST(MLX5_CQE_INVALID);
	CONST(MLX5_CQE_REQ_ERR);
	CONST(MLX5_CQE_RESP_ERR);
	CONST(MLX5_CQ_DOORBELL);
	CONST(MLX5_CQ_DB_REQ_NOT_SOL);
	CONST(MLX5_RCV_DBR);
	CONST(MLX5_SND_DBR);
	printf("}\n\n");
}

/* ---------- segments ---------- */

struct ctrl_case {
	uint16_t pi;
	uint8_t opcode, opmod;
	uint32_t qpn;
	uint8_t fm_ce_se, ds, signature;
	uint32_t imm; /* host order; the segment carries it big-endian */
};

static void segments(void)
{
	static const struct ctrl_case cc[] = {
		{ 0, MLX5_OPCODE_SEND, 0, 0x000001, 0, 2, 0, 0 },
		{ 0xffff, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0xabcdef, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0x11223344 },
		{ 0x1234, MLX5_OPCODE_ATOMIC_CS, 0x08, 0xffffff,
		  MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 4, 0x5a, 0xdeadbeef },
		{ 0x8001, MLX5_OPCODE_RDMA_READ, 0xff, 0x123456, MLX5_WQE_CTRL_SOLICITED, 63, 0xff, 0xffffffff },
	};
	printf("var ctrlVectors = []ctrlVector{\n");
	for (size_t i = 0; i < sizeof(cc) / sizeof(cc[0]); i++) {
		struct mlx5_wqe_ctrl_seg seg;

		prefill(&seg, sizeof(seg), 0xa5);
		mlx5dv_set_ctrl_seg(&seg, cc[i].pi, cc[i].opcode, cc[i].opmod, cc[i].qpn,
				    cc[i].fm_ce_se, cc[i].ds, cc[i].signature, htobe32(cc[i].imm));
		printf("\t{pi: %#x, opcode: %#x, opmod: %#x, qpn: %#x, fmCeSe: %#x, ds: %d, signature: %#x, imm: %#x, want: ",
		       cc[i].pi, cc[i].opcode, cc[i].opmod, cc[i].qpn, cc[i].fm_ce_se, cc[i].ds, cc[i].signature, cc[i].imm);
		bytes(&seg, sizeof(seg));
		printf("},\n");
	}
	printf("}\n\n");

	static const struct {
		uint32_t len, lkey;
		uint64_t addr;
	} dc[] = {
		{ 0, MLX5_INVALID_LKEY, 0 },
		{ 64, 0x1234, 0x7f0012345678 },
		{ 0x80000000, 0xffffffff, 0xfedcba9876543210ull },
	};
	printf("var dataVectors = []dataVector{\n");
	for (size_t i = 0; i < sizeof(dc) / sizeof(dc[0]); i++) {
		struct mlx5_wqe_data_seg seg;

		prefill(&seg, sizeof(seg), 0x3c);
		mlx5dv_set_data_seg(&seg, dc[i].len, dc[i].lkey, (uintptr_t)dc[i].addr);
		printf("\t{length: %#x, lkey: %#x, addr: %#llx, want: ", dc[i].len, dc[i].lkey, (unsigned long long)dc[i].addr);
		bytes(&seg, sizeof(seg));
		printf("},\n");
	}
	printf("}\n\n");

	static const struct {
		uint64_t raddr;
		uint32_t rkey;
	} rc[] = { { 0x1000, 0x42 }, { 0xffffffffffffff00ull, 0xfedcba98 } };
	printf("var raddrVectors = []raddrVector{\n");
	for (size_t i = 0; i < sizeof(rc) / sizeof(rc[0]); i++) {
		struct mlx5_wqe_raddr_seg seg;

		prefill(&seg, sizeof(seg), 0x11);
		seg.raddr = htobe64(rc[i].raddr);
		seg.rkey = htobe32(rc[i].rkey);
		seg.reserved = 0;
		printf("\t{raddr: %#llx, rkey: %#x, want: ", (unsigned long long)rc[i].raddr, rc[i].rkey);
		bytes(&seg, sizeof(seg));
		printf("},\n");
	}
	printf("}\n\n");

	static const struct {
		int op;
		uint64_t swap, cmp_add;
	} ac[] = {
		{ IBV_WR_ATOMIC_CMP_AND_SWP, 0x1111222233334444ull, 0x5555666677778888ull },
		{ IBV_WR_ATOMIC_FETCH_AND_ADD, 0x9999, 0x0102030405060708ull },
	};
	printf("var atomicVectors = []atomicVector{\n");
	for (size_t i = 0; i < sizeof(ac) / sizeof(ac[0]); i++) {
		struct mlx5_wqe_atomic_seg seg;

		prefill(&seg, sizeof(seg), 0x77);
		/* qp.c: compare-and-swap sets both; fetch-and-add only swap_add */
		if (ac[i].op == IBV_WR_ATOMIC_CMP_AND_SWP) {
			seg.swap_add = htobe64(ac[i].swap);
			seg.compare = htobe64(ac[i].cmp_add);
		} else {
			seg.swap_add = htobe64(ac[i].cmp_add);
		}
		printf("\t{opcode: %d, swap: %#llx, compareAdd: %#llx, want: ", ac[i].op,
		       (unsigned long long)ac[i].swap, (unsigned long long)ac[i].cmp_add);
		bytes(&seg, sizeof(seg));
		printf("},\n");
	}
	printf("}\n\n");

	printf("var dgramVectors = []dgramVector{\n");
	for (int i = 0; i < 2; i++) {
		struct mlx5_wqe_datagram_seg seg;
		uint8_t rmac[6] = { 0x02, 0x00, 0x5e, 0x10, 0x20, (uint8_t)(0x30 + i) };
		uint8_t rgid[16];
		uint64_t key = i ? 0x0123456789abcdefull : (uint64_t)0x11111111 << 32;

		for (int j = 0; j < 16; j++)
			rgid[j] = (uint8_t)(0xf0 + j * (i + 1));
		prefill(&seg, sizeof(seg), 0x5f);
		mlx5dv_set_dgram_seg(&seg, key, 0x123456 + i, (uint8_t)i, 0x7a, 0x05 * i, 0xc000 + i,
				     rmac, 0x20 + i, 64 - i, 0x40012345 + i, rgid);
		printf("\t{key: %#llx, dqp: %#x, ext: %d, rateSL: 0x7a, flMLID: %#x, rlid: %#x, tclass: %#x, hopLimit: %d, grhGidFl: %#x, rmac: ",
		       (unsigned long long)key, 0x123456 + i, i, 0x05 * i, 0xc000 + i, 0x20 + i, 64 - i, 0x40012345 + i);
		bytes(rmac, 6);
		printf(", rgid: ");
		bytes(rgid, 16);
		printf(", want: ");
		bytes(&seg, sizeof(seg));
		printf("},\n");
	}
	printf("}\n\n");
}

/* ---------- address vectors (verbs.c mlx5_create_ah) ---------- */

/* rdma-core v44 verbs.c ib_to_mlx5_rate_table, written by enum name. */
static const uint8_t rate_table[] = {
	[IBV_RATE_MAX] = 0,	   [1] = 0,
	[IBV_RATE_2_5_GBPS] = 7,   [IBV_RATE_10_GBPS] = 8,  [IBV_RATE_30_GBPS] = 9,
	[IBV_RATE_5_GBPS] = 10,	   [IBV_RATE_20_GBPS] = 11, [IBV_RATE_40_GBPS] = 12,
	[IBV_RATE_60_GBPS] = 13,   [IBV_RATE_80_GBPS] = 14, [IBV_RATE_120_GBPS] = 15,
	[IBV_RATE_14_GBPS] = 11,   [IBV_RATE_56_GBPS] = 13, [IBV_RATE_112_GBPS] = 15,
	[IBV_RATE_168_GBPS] = 0,   [IBV_RATE_25_GBPS] = 9,  [IBV_RATE_100_GBPS] = 15,
	[IBV_RATE_200_GBPS] = 0,   [IBV_RATE_300_GBPS] = 0, [IBV_RATE_28_GBPS] = 9,
	[IBV_RATE_50_GBPS] = 13,   [IBV_RATE_400_GBPS] = 0, [IBV_RATE_600_GBPS] = 0,
};

struct ah_case {
	const char *name;
	int eth;
	uint16_t dlid;
	uint8_t sl, src_path_bits, static_rate, is_global;
	uint32_t flow_label;
	uint8_t sgid_index, hop_limit, traffic_class;
	uint8_t dmac[6];
	uint16_t sport; /* RoCE v2 UDP source port the provider picked */
};

static const struct ah_case ahs[] = {
	{ "ib local", 0, 0x0017, 3, 0x05, IBV_RATE_100_GBPS, 0 },
	{ "ib global", 0, 0xbeef, 15, 0x7f, IBV_RATE_800_GBPS, 1, 0xabcde, 3, 64, 0x10 },
	{ "roce", 1, 0, 5, 0, IBV_RATE_25_GBPS, 1, 0, 1, 255, 0x68, { 0x02, 0x11, 0x22, 0x33, 0x44, 0x55 }, 0xc123 },
	/* sport 0: derived from the flow label with ibv_flow_label_to_udp_sport */
	{ "roce flow label", 1, 0, 7, 0, IBV_RATE_MAX, 1, 0x12345, 0, 1, 0, { 0xb8, 0xce, 0xf6, 0, 1, 2 }, 0 },
};

static uint16_t ah_sport(const struct ah_case *a)
{
	if (a->sport || !a->eth)
		return a->sport;
	return ibv_flow_label_to_udp_sport(a->flow_label);
}

static void make_av(const struct ah_case *a, struct mlx5_wqe_av *av, uint8_t gid[16])
{
	struct mlx5_wqe_datagram_seg seg;
	uint8_t static_rate = a->static_rate < sizeof(rate_table) ? rate_table[a->static_rate] : 0;
	uint8_t rmac[6] = { 0 }, rgid[16] = { 0 }, tclass = 0, hop = 0, fl_mlid = 0, stat_rate_sl;
	uint16_t rlid;
	uint32_t grh_gid_fl = 0, grh;

	for (int j = 0; j < 16; j++)
		gid[j] = (uint8_t)(0x20 + j + a->sl);
	if (a->eth) {
		rlid = ah_sport(a);
		grh = 0;
		stat_rate_sl = (uint8_t)((static_rate << 4) | ((a->sl & 0x7) << 1));
		memcpy(rmac, a->dmac, 6);
	} else {
		fl_mlid = a->src_path_bits & 0x7f;
		rlid = a->dlid;
		grh = 1;
		stat_rate_sl = (uint8_t)((static_rate << 4) | (a->sl & 0xf));
	}
	if (a->is_global) {
		tclass = a->traffic_class;
		hop = a->hop_limit;
		grh_gid_fl = (grh << 30) | ((uint32_t)a->sgid_index << 20) | (a->flow_label & 0xfffff);
		memcpy(rgid, gid, 16);
	}
	memset(&seg, 0, sizeof(seg));
	mlx5dv_set_dgram_seg(&seg, 0, 0, 0, stat_rate_sl, fl_mlid, rlid, rmac, tclass, hop, grh_gid_fl, rgid);
	*av = seg.av;
}

static void avs(void)
{
	printf("var avVectors = []avVector{\n");
	for (size_t i = 0; i < sizeof(ahs) / sizeof(ahs[0]); i++) {
		const struct ah_case *a = &ahs[i];
		struct mlx5_wqe_av av;
		uint8_t gid[16];

		make_av(a, &av, gid);
		printf("\t{name: \"%s\", eth: %s, sport: %#x,\n", a->name, a->eth ? "true" : "false", ah_sport(a));
		printf("\t\tattr: qp.AHAttr{DLID: %#x, SL: %d, SrcPathBits: %#x, StaticRate: %d, IsGlobal: %s, FlowLabel: %#x, SGIDIndex: %d, HopLimit: %d, TrafficClass: %#x, DGID: ",
		       a->dlid, a->sl, a->src_path_bits, a->static_rate, a->is_global ? "true" : "false", a->flow_label,
		       a->sgid_index, a->hop_limit, a->traffic_class);
		bytes(gid, 16);
		printf("}, dmac: ");
		bytes(a->dmac, 6);
		printf(", want: ");
		bytes(&av, sizeof(av));
		printf("},\n");
	}
	printf("}\n\n");
}

/* ---------- send WQEs (qp.c _mlx5_post_send) ---------- */

struct csge {
	uint64_t addr;
	uint32_t length, lkey;
};

struct cwr {
	uint64_t id;
	int opcode;
	unsigned flags;
	uint32_t imm;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t cmp_add, swap;
	uint32_t rqpn, rqkey;
	int av; /* index into ahs for UD */
	int nsge;
	struct csge sg[4];
	int inl; /* the SGEs are inline data: sg[i].length bytes each */
};

struct csq {
	uint8_t *buf, *qend;
	unsigned wqe_cnt, cur_post;
	uint32_t qpn;
	int type;
	uint8_t sig_bits;
};

static uint8_t mlx5_opcode(int op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE: return MLX5_OPCODE_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return MLX5_OPCODE_RDMA_WRITE_IMM;
	case IBV_WR_SEND: return MLX5_OPCODE_SEND;
	case IBV_WR_SEND_WITH_IMM: return MLX5_OPCODE_SEND_IMM;
	case IBV_WR_RDMA_READ: return MLX5_OPCODE_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return MLX5_OPCODE_ATOMIC_CS;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return MLX5_OPCODE_ATOMIC_FA;
	}
	abort();
}

/* inline_payload is the data of inline SGE k of work request j. */
static uint8_t inline_data[8][4][256];

static void fill_inline(void)
{
	for (int j = 0; j < 8; j++)
		for (int k = 0; k < 4; k++)
			for (int i = 0; i < 256; i++)
				inline_data[j][k][i] = (uint8_t)(j * 31 + k * 17 + i + 1);
}

static unsigned post_one(struct csq *sq, const struct cwr *w, int j)
{
	unsigned idx = sq->cur_post & (sq->wqe_cnt - 1);
	uint8_t *ctrl = sq->buf + (idx << MLX5_SEND_WQE_SHIFT);
	uint8_t *seg = ctrl + sizeof(struct mlx5_wqe_ctrl_seg);
	unsigned size = sizeof(struct mlx5_wqe_ctrl_seg) / 16;
	uint8_t fm_ce_se = sq->sig_bits | ((w->flags & IBV_SEND_FENCE) ? MLX5_WQE_CTRL_FENCE : 0) |
			   ((w->flags & IBV_SEND_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
			   ((w->flags & IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0);
	uint32_t imm = 0;

	if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		imm = htobe32(w->imm);
	memset(ctrl + 8, 0, 4);

	if (sq->type == IBV_QPT_RC || sq->type == IBV_QPT_UC) {
		struct mlx5_wqe_raddr_seg *r = (void *)seg;

		switch (w->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			r->raddr = htobe64(w->raddr);
			r->rkey = htobe32(w->rkey);
			r->reserved = 0;
			seg += sizeof(*r);
			size += sizeof(*r) / 16;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD: {
			struct mlx5_wqe_atomic_seg *a = (void *)(seg + sizeof(*r));

			r->raddr = htobe64(w->raddr);
			r->rkey = htobe32(w->rkey);
			r->reserved = 0;
			if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
				a->swap_add = htobe64(w->swap);
				a->compare = htobe64(w->cmp_add);
			} else {
				a->swap_add = htobe64(w->cmp_add);
			}
			seg += sizeof(*r) + sizeof(*a);
			size += (sizeof(*r) + sizeof(*a)) / 16;
			break;
		}
		}
	} else if (sq->type == IBV_QPT_UD) {
		struct mlx5_wqe_datagram_seg *d = (void *)seg;
		uint8_t gid[16];

		make_av(&ahs[w->av], &d->av, gid);
		d->av.dqp_dct = htobe32(w->rqpn | MLX5_EXTENDED_UD_AV);
		d->av.key.qkey.qkey = htobe32(w->rqkey);
		seg += sizeof(*d);
		size += sizeof(*d) / 16;
		if (seg == sq->qend)
			seg = sq->buf;
	}

	if (w->inl && w->nsge) {
		struct mlx5_wqe_inl_data_seg *hdr = (void *)seg;
		uint8_t *dst = seg + sizeof(*hdr);
		unsigned total = 0;

		for (int i = 0; i < w->nsge; i++) {
			const uint8_t *src = inline_data[j][i];
			unsigned len = w->sg[i].length;

			total += len;
			if (dst + len > sq->qend) {
				unsigned part = (unsigned)(sq->qend - dst);

				memcpy(dst, src, part);
				src += part;
				len -= part;
				dst = sq->buf;
			}
			memcpy(dst, src, len);
			dst += len;
		}
		if (total) {
			hdr->byte_count = htobe32(total | MLX5_INLINE_SEG);
			size += (total + sizeof(*hdr) + 15) / 16;
		}
	} else {
		struct mlx5_wqe_data_seg *d = (void *)seg;

		for (int i = 0; i < w->nsge; i++) {
			if ((uint8_t *)d == sq->qend)
				d = (void *)sq->buf;
			if (!w->sg[i].length)
				continue;
			if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
				mlx5dv_set_data_seg(d, 8, w->sg[i].lkey, (uintptr_t)w->sg[i].addr);
			else
				mlx5dv_set_data_seg(d, w->sg[i].length, w->sg[i].lkey, (uintptr_t)w->sg[i].addr);
			d++;
			size++;
		}
	}

	mlx5dv_set_ctrl_seg((void *)ctrl, sq->cur_post & 0xffff, mlx5_opcode(w->opcode), 0, sq->qpn,
			    fm_ce_se, (uint8_t)size, 0, imm);
	sq->cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	return size;
}

struct wqe_case {
	const char *name;
	int type;
	uint32_t qpn;
	unsigned wqe_cnt, start;
	int sig_all;
	int nwr;
	struct cwr wr[6];
};

#define SGE(a, l, k) { a, l, k }

static const struct wqe_case wqes[] = {
	{ "rc send", IBV_QPT_RC, 0x000101, 8, 0, 0, 1,
	  { { .id = 1, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED, .nsge = 1, .sg = { SGE(0x10000, 64, 0x11) } } } },
	{ "rc send with imm, empty sge skipped", IBV_QPT_RC, 0x000102, 8, 3, 0, 1,
	  { { .id = 2, .opcode = IBV_WR_SEND_WITH_IMM, .flags = IBV_SEND_SOLICITED, .imm = 0xa1b2c3d4, .nsge = 3,
	      .sg = { SGE(0x20000, 100, 0x21), SGE(0x20100, 0, 0x22), SGE(0x20200, 28, 0x23) } } } },
	{ "rc rdma write fenced", IBV_QPT_RC, 0x000103, 8, 0, 0, 1,
	  { { .id = 3, .opcode = IBV_WR_RDMA_WRITE, .flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED,
	      .raddr = 0x7f0000001000ull, .rkey = 0xabcd, .nsge = 1, .sg = { SGE(0x30000, 4096, 0x31) } } } },
	{ "rc rdma write with imm", IBV_QPT_RC, 0x000104, 8, 0, 0, 1,
	  { { .id = 4, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .imm = 0x01020304, .raddr = 0x9000, .rkey = 0x42,
	      .nsge = 2, .sg = { SGE(0x1000, 100, 5), SGE(0x2000, 28, 6) } } } },
	{ "rc rdma read", IBV_QPT_RC, 0x000105, 8, 0, 0, 1,
	  { { .id = 5, .opcode = IBV_WR_RDMA_READ, .flags = IBV_SEND_SIGNALED, .raddr = 0xffffffff00000000ull,
	      .rkey = 0x77, .nsge = 1, .sg = { SGE(0x40000, 65536, 0x41) } } } },
	{ "rc compare and swap", IBV_QPT_RC, 0x000106, 8, 0, 0, 1,
	  { { .id = 6, .opcode = IBV_WR_ATOMIC_CMP_AND_SWP, .flags = IBV_SEND_SIGNALED, .raddr = 0xa000, .rkey = 0x43,
	      .cmp_add = 10, .swap = 20, .nsge = 1, .sg = { SGE(0x3000, 8, 5) } } } },
	{ "rc fetch and add", IBV_QPT_RC, 0x000107, 8, 0, 0, 1,
	  { { .id = 7, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .raddr = 0xa008, .rkey = 0x44,
	      .cmp_add = 0x100000001ull, .nsge = 1, .sg = { SGE(0x3008, 16, 5) } } } },
	{ "rc send inline", IBV_QPT_RC, 0x000108, 8, 0, 0, 1,
	  { { .id = 8, .opcode = IBV_WR_SEND, .flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED, .inl = 1, .nsge = 2,
	      .sg = { SGE(0, 10, 0), SGE(0, 30, 0) } } } },
	{ "rc rdma write inline over two BBs", IBV_QPT_RC, 0x000109, 8, 0, 0, 1,
	  { { .id = 9, .opcode = IBV_WR_RDMA_WRITE, .flags = IBV_SEND_INLINE, .raddr = 0x5000, .rkey = 9, .inl = 1,
	      .nsge = 1, .sg = { SGE(0, 100, 0) } } } },
	{ "ud send ib", IBV_QPT_UD, 0x00010a, 8, 0, 0, 1,
	  { { .id = 10, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED, .rqpn = 0x123456, .rqkey = 0x11111111,
	      .av = 1, .nsge = 1, .sg = { SGE(0x50000, 256, 0x51) } } } },
	{ "ud send with imm roce inline", IBV_QPT_UD, 0x00010b, 8, 0, 0, 1,
	  { { .id = 11, .opcode = IBV_WR_SEND_WITH_IMM, .flags = IBV_SEND_INLINE, .imm = 0xfeedface, .rqpn = 1,
	      .rqkey = 0x80010000, .av = 2, .inl = 1, .nsge = 1, .sg = { SGE(0, 20, 0) } } } },
	{ "uc rdma write", IBV_QPT_UC, 0x00010c, 8, 0, 0, 1,
	  { { .id = 12, .opcode = IBV_WR_RDMA_WRITE, .raddr = 0x6000, .rkey = 0x61, .nsge = 1,
	      .sg = { SGE(0x60000, 1, 0x62) } } } },
	{ "rc send on a signal-all QP", IBV_QPT_RC, 0x00010d, 8, 0, 1, 1,
	  { { .id = 13, .opcode = IBV_WR_SEND, .nsge = 1, .sg = { SGE(0x70000, 8, 0x71) } } } },
	{ "rc send without data", IBV_QPT_RC, 0x00010e, 8, 0, 0, 2,
	  { { .id = 14, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED },
	    { .id = 15, .opcode = IBV_WR_SEND, .flags = IBV_SEND_INLINE, .inl = 1 } } },
	{ "wrap: rc write, data segments past the end", IBV_QPT_RC, 0x000111, 4, 3, 0, 1,
	  { { .id = 16, .opcode = IBV_WR_RDMA_WRITE, .flags = IBV_SEND_SIGNALED, .raddr = 0x8000, .rkey = 0x81, .nsge = 4,
	      .sg = { SGE(0x80000, 1, 1), SGE(0x80010, 2, 2), SGE(0x80020, 3, 3), SGE(0x80030, 4, 4) } } } },
	{ "wrap: ud send, datagram fills the last BB", IBV_QPT_UD, 0x000112, 4, 7, 0, 1,
	  { { .id = 17, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED, .rqpn = 0xabcdef, .rqkey = 7, .av = 0,
	      .nsge = 3, .sg = { SGE(0x90000, 10, 1), SGE(0x90010, 20, 2), SGE(0x90020, 30, 3) } } } },
	{ "wrap: ud send inline, data at the ring's start", IBV_QPT_UD, 0x000115, 2, 1, 0, 1,
	  { { .id = 24, .opcode = IBV_WR_SEND, .flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED, .rqpn = 0x10, .rqkey = 0x20,
	      .av = 3, .inl = 1, .nsge = 2, .sg = { SGE(0, 12, 0), SGE(0, 40, 0) } } } },
	{ "wrap: rc send inline data past the end", IBV_QPT_RC, 0x000113, 4, 2, 0, 1,
	  { { .id = 18, .opcode = IBV_WR_SEND, .flags = IBV_SEND_INLINE, .inl = 1, .nsge = 3,
	      .sg = { SGE(0, 60, 0), SGE(0, 50, 0), SGE(0, 90, 0) } } } },
	{ "wrap: a list across the end and the 16-bit index", IBV_QPT_RC, 0x000114, 4, 0xfffe, 0, 5,
	  { { .id = 19, .opcode = IBV_WR_RDMA_WRITE, .raddr = 0x1, .rkey = 1, .nsge = 3,
	      .sg = { SGE(0xa0000, 1, 1), SGE(0xa0010, 2, 2), SGE(0xa0020, 3, 3) } },
	    { .id = 20, .opcode = IBV_WR_SEND, .flags = IBV_SEND_SIGNALED, .nsge = 1, .sg = { SGE(0xa0100, 9, 9) } },
	    { .id = 21, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .raddr = 0x8, .rkey = 2, .cmp_add = 1, .nsge = 1,
	      .sg = { SGE(0xa0200, 8, 3) } },
	    { .id = 22, .opcode = IBV_WR_SEND_WITH_IMM, .imm = 5, .flags = IBV_SEND_INLINE, .inl = 1, .nsge = 1,
	      .sg = { SGE(0, 44, 0) } },
	    { .id = 23, .opcode = IBV_WR_RDMA_READ, .raddr = 0x10, .rkey = 3, .nsge = 2,
	      .sg = { SGE(0xa0300, 16, 4), SGE(0xa0400, 16, 4) } } } },
};

static void send_wqes(void)
{
	printf("var wqeVectors = []wqeVector{\n");
	for (size_t c = 0; c < sizeof(wqes) / sizeof(wqes[0]); c++) {
		const struct wqe_case *k = &wqes[c];
		size_t n = (size_t)k->wqe_cnt * MLX5_SEND_WQE_BB;
		uint8_t *buf = malloc(n);
		struct csq sq = { buf, buf + n, k->wqe_cnt, k->start, k->qpn, k->type,
				  k->sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0 };

		prefill(buf, n, (unsigned)c);
		printf("\t{name: \"%s\", qpType: %d, qpn: %#x, wqeCnt: %u, startPost: %#x, sigAll: %s, prefill: %zu, wrs: []wrVector{\n",
		       k->name, k->type, k->qpn, k->wqe_cnt, k->start, k->sig_all ? "true" : "false", c);
		for (int j = 0; j < k->nwr; j++) {
			const struct cwr *w = &k->wr[j];
			unsigned ds = post_one(&sq, w, j);

			printf("\t\t{id: %llu, opcode: %d, flags: %#x, imm: %#x, remoteAddr: %#llx, rkey: %#x, compareAdd: %#llx, swap: %#llx, remoteQPN: %#x, remoteQKey: %#x, av: %d, ",
			       (unsigned long long)w->id, w->opcode, w->flags, w->imm, (unsigned long long)w->raddr, w->rkey,
			       (unsigned long long)w->cmp_add, (unsigned long long)w->swap, w->rqpn, w->rqkey,
			       k->type == IBV_QPT_UD ? w->av : -1);
			printf("sges: []sgeVector{");
			for (int i = 0; i < w->nsge; i++)
				printf("%s{%#llx, %u, %#x}", i ? ", " : "", (unsigned long long)w->sg[i].addr, w->sg[i].length, w->sg[i].lkey);
			printf("}");
			if (w->inl) {
				printf(", inline: [][]byte{");
				for (int i = 0; i < w->nsge; i++) {
					printf("%s", i ? ", " : "");
					byteslice(inline_data[j][i], w->sg[i].length);
				}
				printf("}");
			}
			printf(", wantDS: %u, wantPost: %#x},\n", ds, sq.cur_post);
		}
		printf("\t}, want: ");
		byteslice(buf, n);
		printf("},\n");
		free(buf);
	}
	printf("}\n\n");
}

/* ---------- receive WQEs (qp.c mlx5_post_recv, srq.c) ---------- */

struct recv_case {
	const char *name;
	unsigned wqe_shift;
	int nsge;
	struct csge sg[4];
};

static const struct recv_case recvs[] = {
	{ "one sge fills the WQE", 4, 1, { SGE(0x1000, 64, 1) } },
	{ "empty sge skipped, end marker", 6, 3, { SGE(0x2000, 10, 2), SGE(0x3000, 0, 3), SGE(0x4000, 30, 4) } },
	{ "no sge: end marker only", 5, 0 },
	{ "full", 6, 4, { SGE(1, 1, 1), SGE(2, 2, 2), SGE(3, 3, 3), SGE(4, 4, 4) } },
};

static void recv_wqes(void)
{
	printf("var recvVectors = []recvVector{\n");
	for (size_t c = 0; c < sizeof(recvs) / sizeof(recvs[0]); c++) {
		const struct recv_case *k = &recvs[c];
		unsigned size = 1u << k->wqe_shift, max_gs = size / sizeof(struct mlx5_wqe_data_seg);
		uint8_t buf[256];
		struct mlx5_wqe_data_seg *scat = (void *)buf;
		int j = 0;

		prefill(buf, size, 0x40 + (unsigned)c);
		for (int i = 0; i < k->nsge; i++) {
			if (!k->sg[i].length)
				continue;
			mlx5dv_set_data_seg(scat + j++, k->sg[i].length, k->sg[i].lkey, (uintptr_t)k->sg[i].addr);
		}
		if ((unsigned)j < max_gs) {
			scat[j].byte_count = 0;
			scat[j].lkey = htobe32(MLX5_INVALID_LKEY);
			scat[j].addr = 0;
		}
		printf("\t{name: \"%s\", wqeShift: %u, prefill: %u, sges: []sgeVector{", k->name, k->wqe_shift, 0x40 + (unsigned)c);
		for (int i = 0; i < k->nsge; i++)
			printf("%s{%#llx, %u, %#x}", i ? ", " : "", (unsigned long long)k->sg[i].addr, k->sg[i].length, k->sg[i].lkey);
		printf("}, want: ");
		byteslice(buf, size);
		printf("},\n");
	}
	printf("}\n\n");

	/* An SRQ WQE: the next segment is left as it is (it links the free
	 * list), every SGE becomes a data segment, empty ones too. */
	printf("var srqVectors = []recvVector{\n");
	for (size_t c = 0; c < sizeof(recvs) / sizeof(recvs[0]); c++) {
		const struct recv_case *k = &recvs[c];
		unsigned size = 1u << (k->wqe_shift + 1);
		unsigned max_gs = (size - sizeof(struct mlx5_wqe_srq_next_seg)) / sizeof(struct mlx5_wqe_data_seg);
		uint8_t buf[512];
		struct mlx5_wqe_srq_next_seg *next = (void *)buf;
		struct mlx5_wqe_data_seg *scat = (void *)(next + 1);
		int i;

		if ((unsigned)k->nsge > max_gs)
			continue;
		prefill(buf, size, 0x60 + (unsigned)c);
		for (i = 0; i < k->nsge; i++) {
			scat[i].byte_count = htobe32(k->sg[i].length);
			scat[i].lkey = htobe32(k->sg[i].lkey);
			scat[i].addr = htobe64(k->sg[i].addr);
		}
		if ((unsigned)i < max_gs) {
			scat[i].byte_count = 0;
			scat[i].lkey = htobe32(MLX5_INVALID_LKEY);
			scat[i].addr = 0;
		}
		printf("\t{name: \"%s\", wqeShift: %u, prefill: %u, sges: []sgeVector{", k->name, k->wqe_shift + 1, 0x60 + (unsigned)c);
		for (i = 0; i < k->nsge; i++)
			printf("%s{%#llx, %u, %#x}", i ? ", " : "", (unsigned long long)k->sg[i].addr, k->sg[i].length, k->sg[i].lkey);
		printf("}, want: ");
		byteslice(buf, size);
		printf("},\n");
	}
	printf("}\n\n");

	/* mlx5_alloc_srq_buf: a zeroed buffer whose WQEs are linked in order. */
	{
		enum { NWQE = 8, SHIFT = 5 };
		uint8_t buf[NWQE << SHIFT];

		memset(buf, 0, sizeof(buf));
		for (int i = 0; i < NWQE - 1; i++) {
			struct mlx5_wqe_srq_next_seg *next = (void *)(buf + (i << SHIFT));

			next->next_wqe_index = htobe16((uint16_t)(i + 1));
		}
		printf("var srqLinkVector = struct {\n\tnwqe, wqeShift uint32\n\twant     []byte\n}{%d, %d, ", NWQE, SHIFT);
		byteslice(buf, sizeof(buf));
		printf("}\n\n");
	}
}

/* ---------- CQEs (cq.c get_sw_cqe, mlx5_parse_cqe) ---------- */

/* The fixtures the Go test builds: one QP with a send queue of SQ_CNT BBs
 * and a receive queue of RQ_CNT WQEs whose tail starts at RQ_TAIL, and one
 * SRQ of SRQ_CNT WQEs. Work request IDs are SQ_ID+index, RQ_ID+index,
 * SRQ_ID+index; the send queue's wqe_head[i] is WQE_HEAD+i. */
enum {
	FIX_QPN = 0x000abc,
	FIX_SRQN = 0x000077,
	SQ_CNT = 16,
	RQ_CNT = 8,
	RQ_TAIL = 5,
	SRQ_CNT = 16,
	WQE_HEAD = 1000,
};
#define SQ_ID 0x5100000000ull
#define RQ_ID 0x5200000000ull
#define SRQ_ID 0x5300000000ull

struct cqe_case {
	const char *name;
	uint8_t opcode;	   /* CQE opcode */
	uint8_t wqe_op;	   /* requester: the WQE's opcode in sop_drop_qpn */
	uint32_t qpn;
	uint32_t srqn;
	uint16_t wqe_counter;
	uint32_t byte_cnt;
	uint32_t imm;	   /* host order */
	uint32_t flags_rqpn;
	uint16_t slid;
	uint8_t ml_path;
	uint8_t syndrome, vendor;
};

static const struct cqe_case cqes[] = {
	{ "req send", MLX5_CQE_REQ, MLX5_OPCODE_SEND, FIX_QPN, 0, 0x1233, 0x40 },
	{ "req send with imm", MLX5_CQE_REQ, MLX5_OPCODE_SEND_IMM, FIX_QPN, 0, 0xffff },
	{ "req rdma write", MLX5_CQE_REQ, MLX5_OPCODE_RDMA_WRITE, FIX_QPN, 0, 2 },
	{ "req rdma write with imm", MLX5_CQE_REQ, MLX5_OPCODE_RDMA_WRITE_IMM, FIX_QPN, 0, 17 },
	{ "req rdma read", MLX5_CQE_REQ, MLX5_OPCODE_RDMA_READ, FIX_QPN, 0, 4, 65536 },
	{ "req compare and swap", MLX5_CQE_REQ, MLX5_OPCODE_ATOMIC_CS, FIX_QPN, 0, 5, 99 },
	{ "req fetch and add", MLX5_CQE_REQ, MLX5_OPCODE_ATOMIC_FA, FIX_QPN, 0, 6 },
	{ "req unknown qp", MLX5_CQE_REQ, MLX5_OPCODE_SEND, 0x000def, 0, 1 },
	{ "resp send", MLX5_CQE_RESP_SEND, 0, FIX_QPN, 0, 0, 100, 0x0000ffff, 0x05123456, 0x0077, 0x85 },
	{ "resp send with grh", MLX5_CQE_RESP_SEND, 0, FIX_QPN, 0, 0, 1064, 0x00000003, 0x1f000001, 0, 0 },
	{ "resp send with imm", MLX5_CQE_RESP_SEND_IMM, 0, FIX_QPN, 0, 0, 8, 0xcafebabe, 0x20abcdef, 0xffff, 0x7f },
	{ "resp rdma write with imm", MLX5_CQE_RESP_WR_IMM, 0, FIX_QPN, 0, 0, 0, 0x00000001, 0x00000002, 1, 1 },
	{ "resp send with invalidate", MLX5_CQE_RESP_SEND_INV, 0, FIX_QPN, 0, 0, 4, 0x00001234, 0 },
	{ "resp send on srq", MLX5_CQE_RESP_SEND, 0, FIX_QPN, FIX_SRQN, 9, 512, 0, 0x00000042 },
	{ "resp on unknown srq", MLX5_CQE_RESP_SEND, 0, FIX_QPN, 0x000078, 9, 512 },
	{ "resize", MLX5_CQE_RESIZE_CQ, 0, FIX_QPN },
	{ "req error unknown syndrome", MLX5_CQE_REQ_ERR, MLX5_OPCODE_SEND, FIX_QPN, 0, 7, 0, 0, 0, 0, 0, 0x99, 0x12 },
	{ "resp error flush", MLX5_CQE_RESP_ERR, 0, FIX_QPN, 0, 0, 0, 0, 0, 0, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0x77 },
	{ "resp error flush on srq", MLX5_CQE_RESP_ERR, 0, FIX_QPN, FIX_SRQN, 15, 0, 0, 0, 0, 0,
	  MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0x79 },
};

static const uint8_t syndromes[] = {
	MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR,	MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR,
	MLX5_CQE_SYNDROME_LOCAL_PROT_ERR,	MLX5_CQE_SYNDROME_WR_FLUSH_ERR,
	MLX5_CQE_SYNDROME_MW_BIND_ERR,		MLX5_CQE_SYNDROME_BAD_RESP_ERR,
	MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR,	MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR,
	MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,	MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
	MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR,
	MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR,
};

/* mlx5_handle_error_cqe */
static enum ibv_wc_status error_status(uint8_t syndrome)
{
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
	}
	return IBV_WC_GENERAL_ERR;
}

struct expect {
	int ok;
	struct ibv_wc wc;
	uint32_t sq_tail, rq_tail;
	int srq_freed; /* the SRQ WQE returned to the free list, or -1 */
};

static void build_cqe(const struct cqe_case *k, struct mlx5_cqe64 *cqe)
{
	memset(cqe, 0, sizeof(*cqe));
	cqe->sop_drop_qpn = htobe32((uint32_t)k->wqe_op << 24 | k->qpn);
	cqe->srqn_uidx = htobe32(k->srqn);
	cqe->wqe_counter = htobe16(k->wqe_counter);
	cqe->byte_cnt = htobe32(k->byte_cnt);
	cqe->imm_inval_pkey = htobe32(k->imm);
	cqe->flags_rqpn = htobe32(k->flags_rqpn);
	cqe->slid = htobe16(k->slid);
	cqe->ml_path = k->ml_path;
	/* a different clock value in every case */
	cqe->timestamp = htobe64(0x0102030405060708ull ^ (uint64_t)k->wqe_counter << 40 ^ (uint64_t)k->byte_cnt << 8 ^
				 (uint64_t)k->opcode << 56 ^ k->syndrome);
	if (k->opcode == MLX5_CQE_REQ_ERR || k->opcode == MLX5_CQE_RESP_ERR) {
		struct mlx5_err_cqe *e = (void *)cqe;

		e->syndrome = k->syndrome;
		e->vendor_err_synd = k->vendor;
	}
	cqe->op_own = (uint8_t)(k->opcode << 4);
}

/* decode follows mlx5_parse_cqe for CQE version 0. */
static struct expect decode(struct mlx5_cqe64 *cqe)
{
	struct expect x = { .ok = 1, .sq_tail = 0, .rq_tail = RQ_TAIL, .srq_freed = -1 };
	struct ibv_wc *wc = &x.wc;
	uint32_t qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
	uint32_t srqn = be32toh(cqe->srqn_uidx) & 0xffffff;
	uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);
	uint16_t ctr = be16toh(cqe->wqe_counter);

	memset(wc, 0, sizeof(*wc));
	wc->qp_num = qpn;
	switch (opcode) {
	case MLX5_CQE_REQ:
		if (qpn != FIX_QPN) {
			x.ok = 0;
			break;
		}
		switch (be32toh(cqe->sop_drop_qpn) >> 24) {
		case MLX5_OPCODE_RDMA_WRITE_IMM:
			wc->wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_RDMA_WRITE:
			wc->opcode = IBV_WC_RDMA_WRITE;
			break;
		case MLX5_OPCODE_SEND_IMM:
			wc->wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_SEND:
		case MLX5_OPCODE_SEND_INVAL:
			wc->opcode = IBV_WC_SEND;
			break;
		case MLX5_OPCODE_RDMA_READ:
			wc->opcode = IBV_WC_RDMA_READ;
			wc->byte_len = be32toh(cqe->byte_cnt);
			break;
		case MLX5_OPCODE_ATOMIC_CS:
			wc->opcode = IBV_WC_COMP_SWAP;
			wc->byte_len = 8;
			break;
		case MLX5_OPCODE_ATOMIC_FA:
			wc->opcode = IBV_WC_FETCH_ADD;
			wc->byte_len = 8;
			break;
		}
		wc->wr_id = SQ_ID + (ctr & (SQ_CNT - 1));
		x.sq_tail = WQE_HEAD + (ctr & (SQ_CNT - 1)) + 1;
		break;
	case MLX5_CQE_RESP_WR_IMM:
	case MLX5_CQE_RESP_SEND:
	case MLX5_CQE_RESP_SEND_IMM:
	case MLX5_CQE_RESP_SEND_INV: {
		uint32_t frq = be32toh(cqe->flags_rqpn);

		wc->byte_len = be32toh(cqe->byte_cnt);
		if (srqn) {
			if (srqn != FIX_SRQN) {
				x.ok = 0;
				break;
			}
			wc->wr_id = SRQ_ID + (ctr & (SRQ_CNT - 1));
			x.srq_freed = ctr & (SRQ_CNT - 1);
		} else {
			wc->wr_id = RQ_ID + (RQ_TAIL & (RQ_CNT - 1));
			x.rq_tail = RQ_TAIL + 1;
		}
		switch (opcode) {
		case MLX5_CQE_RESP_WR_IMM:
			wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
			wc->wc_flags |= IBV_WC_WITH_IMM;
			wc->imm_data = cqe->imm_inval_pkey;
			break;
		case MLX5_CQE_RESP_SEND:
			wc->opcode = IBV_WC_RECV;
			break;
		case MLX5_CQE_RESP_SEND_IMM:
			wc->opcode = IBV_WC_RECV;
			wc->wc_flags |= IBV_WC_WITH_IMM;
			wc->imm_data = cqe->imm_inval_pkey;
			break;
		case MLX5_CQE_RESP_SEND_INV:
			wc->opcode = IBV_WC_RECV;
			wc->wc_flags |= IBV_WC_WITH_INV;
			wc->invalidated_rkey = be32toh(cqe->imm_inval_pkey);
			break;
		}
		wc->slid = be16toh(cqe->slid);
		wc->sl = (frq >> 24) & 0xf;
		wc->src_qp = frq & 0xffffff;
		wc->dlid_path_bits = cqe->ml_path & 0x7f;
		wc->wc_flags |= ((frq >> 28) & 3) ? IBV_WC_GRH : 0;
		wc->pkey_index = be32toh(cqe->imm_inval_pkey) & 0xffff;
		break;
	}
	case MLX5_CQE_REQ_ERR:
	case MLX5_CQE_RESP_ERR: {
		struct mlx5_err_cqe *e = (void *)cqe;

		wc->status = error_status(e->syndrome);
		wc->vendor_err = e->vendor_err_synd;
		if (opcode == MLX5_CQE_REQ_ERR) {
			wc->wr_id = SQ_ID + (ctr & (SQ_CNT - 1));
			x.sq_tail = WQE_HEAD + (ctr & (SQ_CNT - 1)) + 1;
		} else if (srqn) {
			wc->wr_id = SRQ_ID + (ctr & (SRQ_CNT - 1));
			x.srq_freed = ctr & (SRQ_CNT - 1);
		} else {
			wc->wr_id = RQ_ID + (RQ_TAIL & (RQ_CNT - 1));
			x.rq_tail = RQ_TAIL + 1;
		}
		break;
	}
	default:
		x.ok = 0; /* resize, tag matching, signature: not a completion here */
	}
	return x;
}

static void print_cqe(const char *name, struct mlx5_cqe64 *cqe)
{
	struct expect x = decode(cqe);
	uint32_t imm = 0;

	if (x.wc.wc_flags & IBV_WC_WITH_IMM)
		imm = be32toh(x.wc.imm_data);
	else if (x.wc.wc_flags & IBV_WC_WITH_INV)
		imm = x.wc.invalidated_rkey;
	printf("\t{name: \"%s\", ok: %s, cqe: ", name, x.ok ? "true" : "false");
	bytes(cqe, sizeof(*cqe));
	if (x.ok)
		printf(", want: wr.Completion{ID: %#llx, Status: %d, Opcode: %d, VendorErr: %#x, ByteLen: %u, Imm: %#x, QPNum: %#x, SrcQP: %#x, Flags: %#x, PKeyIndex: %#x, SLID: %#x, SL: %d, DLIDPathBits: %#x}, sqTail: %u, rqTail: %u, srqFreed: %d",
		       (unsigned long long)x.wc.wr_id, x.wc.status, x.wc.opcode, x.wc.vendor_err, x.wc.byte_len, imm,
		       x.wc.qp_num, x.wc.src_qp, x.wc.wc_flags, x.wc.pkey_index, x.wc.slid, x.wc.sl, x.wc.dlid_path_bits,
		       x.sq_tail, x.rq_tail, x.srq_freed);
	if (x.ok) /* mlx5_cq_read_wc_completion_ts */
		printf(", ts: %#llx", (unsigned long long)be64toh(cqe->timestamp));
	printf("},\n");
}

static void cqe_vectors(void)
{
	struct mlx5_cqe64 cqe;
	char name[64];

	printf("// The CQE fixtures (see hack/mlx5gen/gen.c).\n"
	       "const (\n\tfixQPN   = %#x\n\tfixSRQN  = %#x\n\tfixSQCnt = %d\n\tfixRQCnt = %d\n\tfixRQTail = %d\n"
	       "\tfixSRQCnt = %d\n\tfixWQEHead = %d\n\tfixSQID  = %#llx\n\tfixRQID  = %#llx\n\tfixSRQID = %#llx\n)\n\n",
	       FIX_QPN, FIX_SRQN, SQ_CNT, RQ_CNT, RQ_TAIL, SRQ_CNT, WQE_HEAD, SQ_ID, RQ_ID, SRQ_ID);
	printf("var cqeVectors = []cqeVector{\n");
	for (size_t i = 0; i < sizeof(cqes) / sizeof(cqes[0]); i++) {
		build_cqe(&cqes[i], &cqe);
		print_cqe(cqes[i].name, &cqe);
	}
	for (size_t i = 0; i < sizeof(syndromes); i++) {
		struct cqe_case k = { "", MLX5_CQE_REQ_ERR, MLX5_OPCODE_RDMA_WRITE, FIX_QPN, 0, (uint16_t)(0x100 + i) };

		k.syndrome = syndromes[i];
		k.vendor = (uint8_t)(0x80 + i);
		snprintf(name, sizeof(name), "req error syndrome %#x", syndromes[i]);
		build_cqe(&k, &cqe);
		print_cqe(name, &cqe);
	}
	printf("}\n\n");

	/* Ownership (get_sw_cqe): software owns entry n of a ring of ncqe
	 * when its opcode is not invalid and its owner bit is !!(n & ncqe). */
	printf("var ownerVectors = []ownerVector{\n");
	static const struct {
		uint8_t opcode, owner;
		uint32_t n, ncqe;
	} ov[] = {
		{ MLX5_CQE_REQ, 0, 0, 8 },	     { MLX5_CQE_REQ, 1, 0, 8 },	     { MLX5_CQE_REQ, 1, 8, 8 },
		{ MLX5_CQE_REQ, 0, 8, 8 },	     { MLX5_CQE_RESP_SEND, 0, 15, 8 }, { MLX5_CQE_RESP_SEND, 1, 15, 8 },
		{ MLX5_CQE_INVALID, 0, 0, 8 },	     { MLX5_CQE_INVALID, 1, 8, 8 },    { MLX5_CQE_REQ_ERR, 0, 0xffffffff, 4 },
		{ MLX5_CQE_REQ_ERR, 1, 0xffffffff, 4 }, { MLX5_CQE_RESP_ERR, 1, 1 << 24, 1 << 24 },
	};
	for (size_t i = 0; i < sizeof(ov) / sizeof(ov[0]); i++) {
		memset(&cqe, 0, sizeof(cqe));
		cqe.op_own = (uint8_t)(ov[i].opcode << 4);
		mlx5dv_set_cqe_owner(&cqe, ov[i].owner);
		int owned = mlx5dv_get_cqe_opcode(&cqe) != MLX5_CQE_INVALID &&
			    !((cqe.op_own & MLX5_CQE_OWNER_MASK) ^ !!(ov[i].n & ov[i].ncqe));
		printf("\t{opOwn: %#x, n: %#x, ncqe: %u, owned: %s, owner: %d, opcode: %d, se: %d, format: %d},\n", cqe.op_own,
		       ov[i].n, ov[i].ncqe, owned ? "true" : "false", mlx5dv_get_cqe_owner(&cqe),
		       mlx5dv_get_cqe_opcode(&cqe), mlx5dv_get_cqe_se(&cqe), mlx5dv_get_cqe_format(&cqe));
	}
	printf("}\n\n");
}

/* ---------- clock (mlx5dv_ts_to_ns) ---------- */

/* CQE timestamps to nanoseconds with the clock info the kernel keeps
 * (struct mlx5dv_clock_info, as mlx5dv_get_clock_info copies it): a
 * 156.25 MHz clock in 41 bits, the width ConnectX-4 counts in, and a
 * 1 GHz one in 64; timestamps ahead of and behind the info's moment,
 * across the counter's wrap, and past half its range (taken as behind). */
static void ts_vectors(void)
{
	static const struct mlx5dv_clock_info infos[] = {
		{ .nsec = 1700000000123456789ull, .last_cycles = 0x100000000ull, .frac = 0x12345,
		  .mult = 53687091, .shift = 23, .mask = (1ull << 41) - 1 },
		{ .nsec = 1700000000123456789ull, .last_cycles = (1ull << 41) - 1000, .frac = 0x7fffff,
		  .mult = 53687091, .shift = 23, .mask = (1ull << 41) - 1 },
		{ .nsec = 1800000000000000000ull, .last_cycles = 0xfffffffffffff000ull, .frac = 0,
		  .mult = 1 << 20, .shift = 20, .mask = ~0ull },
		{ .nsec = 1800000000000000000ull, .last_cycles = 12345, .frac = 3 << 19,
		  .mult = 1 << 20, .shift = 20, .mask = ~0ull },
	};
	static const int64_t deltas[] = { 0, 1, -1, 999, -999, 1000000, -1000000, 156250000, -156250000 };

	printf("var tsToNSVectors = []tsToNSVector{\n");
	for (size_t i = 0; i < sizeof(infos) / sizeof(infos[0]); i++) {
		struct mlx5dv_clock_info ci = infos[i];
		uint64_t ts[sizeof(deltas) / sizeof(deltas[0]) + 2];
		size_t n = 0;

		for (size_t j = 0; j < sizeof(deltas) / sizeof(deltas[0]); j++)
			ts[n++] = (ci.last_cycles + (uint64_t)deltas[j]) & ci.mask;
		ts[n++] = (ci.last_cycles + ci.mask / 2 + 7) & ci.mask; /* past half the range */
		ts[n++] = (ci.last_cycles + ci.mask / 2) & ci.mask;	/* just within it */
		for (size_t j = 0; j < n; j++)
			printf("\t{info: clockInfo{nsec: %llu, lastCycles: %#llx, frac: %#llx, mult: %u, shift: %u, mask: %#llx}, ts: %#llx, ns: %llu},\n",
			       (unsigned long long)ci.nsec, (unsigned long long)ci.last_cycles,
			       (unsigned long long)ci.frac, ci.mult, ci.shift, (unsigned long long)ci.mask,
			       (unsigned long long)ts[j], (unsigned long long)mlx5dv_ts_to_ns(&ci, ts[j]));
	}
	printf("}\n\n");
}

/* 128-byte CQEs (MLX5_CQE_SIZE=128, mlx5dv_cq_init_attr.cqe_size): each
 * entry is 128 bytes and its struct mlx5_cqe64 is the second half; the
 * first half holds data the device scatters into the CQE when asked to.
 * mlx5_alloc_cq_buf zeroes the ring and marks each entry's mlx5_cqe64
 * invalid; get_sw_cqe looks at entry n & (ncqe - 1), at byte 64 of it. */
enum { RING128 = 4, CQE128 = 128 };

static void cqe128_vectors(void)
{
	static uint8_t ring[RING128 * CQE128];
	/* What the device wrote, by entry: a CQE case and its owner bit.
	 * Entry 3 stays as allocated (invalid). */
	static const struct {
		int cqe_case; /* index into cqes, -1: none */
		uint8_t owner;
	} written[RING128] = { { 0, 0 }, { 13, 0 }, { 10, 1 }, { -1, 0 } };

	memset(ring, 0, sizeof(ring));
	for (int i = 0; i < RING128; i++)
		((struct mlx5_cqe64 *)(ring + i * CQE128) + 1)->op_own = MLX5_CQE_INVALID << 4;
	printf("// cqe128Init is a ring of %d 128-byte CQEs as mlx5_alloc_cq_buf\n"
	       "// leaves it (cqe_sz 128).\n",
	       RING128);
	printf("var cqe128Init = ");
	bytes(ring, sizeof(ring));
	printf("\n\n");

	for (int i = 0; i < RING128; i++) {
		struct mlx5_cqe64 *c64 = (struct mlx5_cqe64 *)(ring + i * CQE128) + 1;

		if (written[i].cqe_case < 0)
			continue;
		prefill(ring + i * CQE128, 64, 0x40 + i); /* scattered data */
		build_cqe(&cqes[written[i].cqe_case], c64);
		mlx5dv_set_cqe_owner(c64, written[i].owner);
	}
	printf("// cqe128Ring is that ring after the device wrote entries 0 and 1\n"
	       "// in pass 0 and entry 2 in pass 1, data in their first halves.\n");
	printf("var cqe128Ring = ");
	bytes(ring, sizeof(ring));
	printf("\n\n");

	/* Polls at consumer indexes over two passes: the offset in the ring of
	 * the mlx5_cqe64 get_sw_cqe returns (-1: none) and the CQE case it is. */
	printf("var cqe128Polls = []cqe128Poll{\n");
	for (uint32_t n = 0; n < 2 * RING128; n++) {
		uint8_t *e = ring + (n & (RING128 - 1)) * CQE128;
		struct mlx5_cqe64 *c64 = (struct mlx5_cqe64 *)e + 1;
		int owned = mlx5dv_get_cqe_opcode(c64) != MLX5_CQE_INVALID &&
			    !((c64->op_own & MLX5_CQE_OWNER_MASK) ^ !!(n & RING128));
		int k = written[n & (RING128 - 1)].cqe_case;

		printf("\t{n: %u, off: %d, name: \"%s\"},\n", n, owned ? (int)((uint8_t *)c64 - ring) : -1,
		       owned ? cqes[k].name : "");
	}
	printf("}\n\n");
}

/* ---------- queue sizes (verbs.c) ---------- */

struct limits {
	unsigned max_sq_desc_sz, max_rq_desc_sz, max_send_wqebb, max_recv_wr, max_srq_recv_wr;
};

static const struct limits lim = { 512, 512, 1 << 15, 1 << 15, 1 << 15 };

static unsigned roundup_pow2(unsigned v)
{
	unsigned r = 1;

	while (r < v)
		r <<= 1;
	return r;
}

static unsigned log2u(unsigned v)
{
	unsigned s = 0;

	while ((1u << s) < v)
		s++;
	return s;
}

static int sq_overhead(int type)
{
	size_t size = sizeof(struct mlx5_wqe_ctrl_seg);
	size_t rdma = sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_raddr_seg);
	size_t atomic = rdma + sizeof(struct mlx5_wqe_atomic_seg);
	size_t mw = sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_umr_ctrl_seg) +
		    sizeof(struct mlx5_wqe_mkey_context_seg) +
		    (sizeof(struct mlx5_wqe_umr_klm_seg) > 64 ? sizeof(struct mlx5_wqe_umr_klm_seg) : 64);

	switch (type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC: /* default send ops: every RC/UC operation, memory windows too */
		if (rdma > size)
			size = rdma;
		if (atomic > size)
			size = atomic;
		if (mw > size)
			size = mw;
		return (int)size;
	case IBV_QPT_UD: /* send, send with immediate, TSO */
		return (int)(size + sizeof(struct mlx5_wqe_datagram_seg));
	}
	return -1;
}

struct size_case {
	const char *name;
	int type;
	struct ibv_qp_cap cap;
	int srq;
};

static const struct size_case sizes[] = {
	{ "rc 64x1", IBV_QPT_RC, { 64, 64, 1, 1, 0 } },
	{ "rc 16x4 inline 128", IBV_QPT_RC, { 16, 100, 4, 3, 128 } },
	{ "rc 1x1", IBV_QPT_RC, { 1, 1, 1, 1, 0 } },
	{ "rc inline larger than the gather list", IBV_QPT_RC, { 10, 10, 1, 1, 200 } },
	{ "uc 128x2", IBV_QPT_UC, { 128, 128, 2, 2, 16 } },
	{ "ud 128x2 inline 64", IBV_QPT_UD, { 128, 512, 2, 1, 64 } },
	{ "ud 1x1", IBV_QPT_UD, { 1, 1, 1, 1, 0 } },
	{ "rc on an srq", IBV_QPT_RC, { 32, 32, 1, 4, 0 }, 1 },
	{ "rc receive only", IBV_QPT_RC, { 0, 16, 0, 2, 0 } },
	{ "rc too many send sges", IBV_QPT_RC, { 8, 8, 21, 1, 0 } },
	{ "rc inline too large", IBV_QPT_RC, { 8, 8, 1, 1, 400 } },
	{ "rc too many receive sges", IBV_QPT_RC, { 8, 8, 1, 33, 0 } },
	{ "rc too many receives", IBV_QPT_RC, { 8, 40000, 1, 1, 0 } },
};

static void size_vectors(void)
{
	printf("var sizeLimits = limits{maxSQDescSz: %u, maxRQDescSz: %u, maxSendWQEBB: %u, maxRecvWR: %u, maxSRQRecvWR: %u}\n\n",
	       lim.max_sq_desc_sz, lim.max_rq_desc_sz, lim.max_send_wqebb, lim.max_recv_wr, lim.max_srq_recv_wr);
	printf("var sizeVectors = []sizeVector{\n");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const struct size_case *k = &sizes[i];
		struct ibv_qp_cap c = k->cap;
		int err = 0;
		unsigned wqe_size = 0, sq_cnt = 0, sq_post = 0, inl = 0, sq_bytes = 0;
		unsigned rq_cnt = 0, rq_shift = 0, rq_post = 0, rq_gs = 0, rq_bytes = 0;

		/* mlx5_calc_sq_size / mlx5_calc_send_wqe */
		if (c.max_send_wr) {
			int over = sq_overhead(k->type), size = over, inl_size = 0, tot;

			if (c.max_inline_data)
				inl_size = size + (int)((sizeof(struct mlx5_wqe_inl_data_seg) + c.max_inline_data + 15) & ~15u);
			if (c.max_send_sge > (lim.max_sq_desc_sz - size) / sizeof(struct mlx5_wqe_data_seg))
				err = 1;
			size += c.max_send_sge * sizeof(struct mlx5_wqe_data_seg);
			tot = size > inl_size ? size : inl_size;
			if (tot > (int)lim.max_sq_desc_sz)
				err = 1;
			wqe_size = (tot + MLX5_SEND_WQE_BB - 1) & ~(MLX5_SEND_WQE_BB - 1);
			if (wqe_size > lim.max_sq_desc_sz)
				err = 1;
			inl = wqe_size - over - sizeof(struct mlx5_wqe_inl_data_seg);
			sq_bytes = roundup_pow2(c.max_send_wr * wqe_size);
			sq_cnt = sq_bytes / MLX5_SEND_WQE_BB;
			sq_post = sq_bytes / wqe_size;
			if (sq_cnt > lim.max_send_wqebb)
				err = 1;
		}
		/* mlx5_calc_rq_size / mlx5_calc_rcv_wqe */
		if (c.max_recv_wr) {
			if (c.max_recv_wr > lim.max_recv_wr)
				err = 1;
			if (!k->srq) {
				unsigned ws = (c.max_recv_sge ? c.max_recv_sge : 1) * sizeof(struct mlx5_wqe_data_seg);

				if (ws > lim.max_rq_desc_sz)
					err = 1;
				ws = roundup_pow2(ws);
				rq_bytes = roundup_pow2(c.max_recv_wr) * ws;
				if (rq_bytes < MLX5_SEND_WQE_BB)
					rq_bytes = MLX5_SEND_WQE_BB;
				rq_cnt = rq_bytes / ws;
				rq_shift = log2u(ws);
				rq_post = rq_cnt;
				rq_gs = ws / sizeof(struct mlx5_wqe_data_seg);
			}
		}
		printf("\t{name: \"%s\", qpType: %d, caps: qp.Caps{MaxSendWR: %u, MaxRecvWR: %u, MaxSendSGE: %u, MaxRecvSGE: %u, MaxInlineData: %u}, hasSRQ: %s, err: %s",
		       k->name, k->type, c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data,
		       k->srq ? "true" : "false", err ? "true" : "false");
		if (!err)
			printf(", sq: sqSize{wqeSize: %u, wqeCnt: %u, maxPost: %u, maxGS: %u, maxInline: %u, bytes: %u}, rq: rqSize{wqeCnt: %u, wqeShift: %u, maxPost: %u, maxGS: %u, bytes: %u}",
			       wqe_size, sq_cnt, sq_post, c.max_send_wr ? c.max_send_sge : 0, c.max_send_wr ? inl : 0, sq_bytes,
			       rq_cnt, rq_shift, rq_post, rq_gs, rq_bytes);
		printf("},\n");
	}
	printf("}\n\n");

	/* mlx5_alloc_srq_buf without the wait queue */
	static const struct ibv_srq_attr srqs[] = { { 100, 1, 0 }, { 1, 4, 0 }, { 1000, 31, 0 }, { 7, 0, 0 }, { 8, 32, 0 } };
	printf("var srqSizeVectors = []srqSizeVector{\n");
	for (size_t i = 0; i < sizeof(srqs) / sizeof(srqs[0]); i++) {
		struct ibv_srq_attr a = srqs[i];
		int err = a.max_wr > lim.max_srq_recv_wr || a.max_sge > lim.max_rq_desc_sz / sizeof(struct mlx5_wqe_data_seg);
		unsigned size = sizeof(struct mlx5_wqe_srq_next_seg) + a.max_sge * sizeof(struct mlx5_wqe_data_seg);

		if (size < 32)
			size = 32;
		size = roundup_pow2(size);
		if (size > lim.max_recv_wr)
			err = 1;
		unsigned nwqe = roundup_pow2(a.max_wr + 1);
		printf("\t{attr: provider.SRQInitAttr{MaxWR: %u, MaxSGE: %u}, err: %s", a.max_wr, a.max_sge, err ? "true" : "false");
		if (!err)
			printf(", want: srqSize{wqeShift: %u, nwqe: %u, maxGS: %u, bytes: %u}", log2u(size), nwqe,
			       (unsigned)((size - sizeof(struct mlx5_wqe_srq_next_seg)) / sizeof(struct mlx5_wqe_data_seg)),
			       nwqe * size);
		printf("},\n");
	}
	printf("}\n");
}

int main(void)
{
	fill_inline();
	printf("// Code generated by hack/mlx5gen/generate.sh (make generate-mlx5) from\n"
	       "// rdma-core's mlx5dv.h and verbs.h; DO NOT EDIT.\n\n"
	       "package mlx5\n\n"
	       "import (\n\t\"github.com/rdmago/rdma/provider\"\n\t\"github.com/rdmago/rdma/qp\"\n\t\"github.com/rdmago/rdma/wr\"\n)\n\n");
	offsets();
	segments();
	avs();
	send_wqes();
	recv_wqes();
	cqe_vectors();
	cqe128_vectors();
	ts_vectors();
	size_vectors();
	return 0;
}
