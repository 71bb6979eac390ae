/*
 * common.h: what mlx5cmp's C scenario programs (rc.c, random.c, bench.c)
 * share, defined in common.c: the markers, the common setup and teardown
 * (two registered buffers, one CQ, one RC QP connected to itself) and the
 * completion lines. Each program is built with it:
 *
 *   gcc -O2 -Wall -Wextra -Werror -o OUT scenario/X.c scenario/common.c -libverbs
 *
 * Its Go twin is hack/mlx5cmp/scenario/scen (package scen), which the Go
 * programs share: the same calls in the same order, the same markers.
 * Change one and you must change the other.
 */
#ifndef MLX5CMP_SCENARIO_COMMON_H
#define MLX5CMP_SCENARIO_COMMON_H

#include <stdint.h>
#include <infiniband/verbs.h>

enum {
	MARK_FD = 899,
	BUF_SIZE = 64 * 1024,
	CQ_SIZE = 256,
	POLL_BATCH = 16,
	MAX_POLLS = 100,
	IB_PORT = 1,
	GID_INDEX = 1,
	UD_QKEY = 0x11111111,
};

/*
 * Each program defines these: its name in messages ("scenario-c") and
 * its arguments as the message of a missing marker descriptor shows them
 * ("SCENARIO").
 */
extern const char prog_name[];
extern const char prog_args[];

/* The objects of the common setup. */
extern struct ibv_context *ctx;
extern struct ibv_pd *pd;
extern uint8_t *buf0, *buf1;
extern struct ibv_mr *mr0, *mr1;
extern struct ibv_cq *cq;
extern struct ibv_qp *qp;
extern struct ibv_qp_cap caps; /* as granted */
extern union ibv_gid dgid;     /* port 1's GID 1: every QP's destination */

/*
 * new_qp_send_ops, when not 0, makes new_qp create its QP with
 * ibv_create_qp_ex and these IBV_QP_EX_WITH_* flags: libmlx5 fills in the
 * ibv_wr_* functions of a QP only when they are asked for at creation.
 * (rdmago's batch, QP.BeginSend, needs nothing at creation.)
 */
extern uint64_t new_qp_send_ops;

/* new_qp_srq, when set, is the SRQ new_qp's QP receives from. */
extern struct ibv_srq *new_qp_srq;

/* ---- markers ---- */

__attribute__((format(printf, 1, 2))) void mark(const char *format, ...);
__attribute__((noreturn)) void fail(const char *name, int err);

/* ---- completions ---- */

uint32_t wc_imm(const struct ibv_wc *wc);
void emit_wc(const struct ibv_wc *wc);

/* ---- setup and teardown ---- */

struct ibv_qp *new_qp(enum ibv_qp_type type, struct ibv_cq *c, int report);
void destroy_qp(struct ibv_qp *q);
void setup(void);
void teardown(void);

#endif
