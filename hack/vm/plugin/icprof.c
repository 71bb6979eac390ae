/*
 * icprof: a QEMU TCG plugin that counts the instructions a guest executes,
 * per translated block. Each time the guest executes the marker (an 8-byte
 * NOP no compiler emits, `vm mark`), the counts since the previous marker
 * are written to OUT/mark.N, one line per block that ran:
 *
 *	<guest virtual address, hex> <instructions in the block> <executions>
 *
 * and zeroed. Blocks are counted by an inline add, so the guest's clock
 * (icount) and its figures are untouched. Built by `vm icprof`; loaded by
 * `vm run --icount --icprof OUT`, which passes out=OUT.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

struct block {
	uint64_t vaddr;
	uint64_t count; /* executions since the last marker */
	uint32_t insns;
	struct block *next;
};

/* The guest is run with one vCPU (-icount), so the list has one writer. */
static struct block *blocks;
static int marks;
static char out[4096] = ".";

/* nopl 0xdeadbeef(%rax,%rax,1) */
static const uint8_t marker[8] = {0x0f, 0x1f, 0x84, 0x00, 0xef, 0xbe, 0xad, 0xde};

static void dump(unsigned int vcpu, void *udata)
{
	char path[4200];
	FILE *f;

	snprintf(path, sizeof path, "%s/mark.%d", out, marks++);
	f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "icprof: %s: cannot create\n", path);
	for (struct block *b = blocks; b; b = b->next) {
		if (!b->count)
			continue;
		if (f)
			fprintf(f, "%llx %u %llu\n", (unsigned long long)b->vaddr, b->insns,
				(unsigned long long)b->count);
		b->count = 0;
	}
	if (f)
		fclose(f);
}

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	struct block *b = calloc(1, sizeof *b);

	if (!b)
		abort();
	b->vaddr = qemu_plugin_tb_vaddr(tb);
	b->insns = qemu_plugin_tb_n_insns(tb);
	b->next = blocks;
	blocks = b;
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->count, 1);
	for (size_t i = 0; i < b->insns; i++) {
		struct qemu_plugin_insn *in = qemu_plugin_tb_get_insn(tb, i);

		if (qemu_plugin_insn_size(in) == sizeof marker &&
		    memcmp(qemu_plugin_insn_data(in), marker, sizeof marker) == 0) {
			qemu_plugin_register_vcpu_tb_exec_cb(tb, dump, QEMU_PLUGIN_CB_NO_REGS, NULL);
			break;
		}
	}
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
					   int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		if (strncmp(argv[i], "out=", 4) == 0)
			snprintf(out, sizeof out, "%s", argv[i] + 4);
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	return 0;
}
