/*
 * bench.c: the C half of mlx5cmp's speed anchor. It times rdma-core's
 * unmodified libibverbs + libmlx5 posting and polling on mlx5_0 under
 * mlx5cmp's fake mlx5 kernel: only the calls ibv_post_send and
 * ibv_poll_cq, nothing of the fake device's work, which runs in the
 * supervisor while the program is stopped in a marker's write.
 *
 * Its Go twin is hack/mlx5cmp/scenario/gobench/main.go: the same setup (the
 * setup and teardown of rc.c, in common.c), the same requests, the same
 * loop, the same output. Change one and you must change the other.
 *
 *   gcc -O2 -Wall -Wextra -o bin/mlx5cmp/bench-c hack/mlx5cmp/scenario/bench.c hack/mlx5cmp/scenario/common.c -libverbs
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "common.h"

const char prog_name[] = "bench-c";
const char prog_args[] = "N";

enum {
	MSG_SIZE = 64,
	DEFAULT_K = 64,
	CLOCK_PAIRS = 10000,
};

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
