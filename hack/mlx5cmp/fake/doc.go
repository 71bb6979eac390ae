// Package fake is a fake mlx5_ib kernel in user space: the uverbs core
// (uverbs_ioctl.c, uverbs_cmd.c, uverbs_std_types_*.c) and mlx5_ib's
// command layer (main.c mlx5_ib_alloc_ucontext and the UAR object, cq.c
// create_cq_user, qp.c create_user_qp) as far as rdma-core's libmlx5 and
// rdmago's provider use them. mlx5cmp's supervisor hands it every ioctl
// and write the target makes on /dev/infiniband/uverbs0; both drivers run
// against it unchanged, and each command becomes an Event for the
// transcript.
//
// # What it checks
//
// The ioctl header (length, reserved fields: EINVAL, EPROTONOSUPPORT),
// unknown methods and unknown mandatory attributes (EPROTONOSUPPORT),
// missing mandatory attributes, duplicate attributes, attribute sizes
// against the kernel's declarations (EINVAL; a longer struct with a
// non-zero tail: EOPNOTSUPP), commands before GET_CONTEXT (EINVAL), the
// write header (in_words against the count, extended header rules:
// EINVAL; short requests or responses: ENOSPC, which libibverbs' probe of
// UVERBS_METHOD_INVOKE_WRITE relies on), unknown handles (ENOENT on the
// ioctl path, EINVAL on the write path, as uobj_get_obj_read), objects in
// use (EBUSY), mlx5's request checks (alloc_ucontext's request size, flags
// and reserved fields; CQ flags, cqe_size, CQ and QP sizes against
// log_max_cq_sz/log_max_qp_sz, sq_wqe_count a power of two, the user
// index with CQE version 1, unmapped buffers: EFAULT as ib_umem_get), the
// UAR page a CQ or QP names being one of the context's (the firmware's
// check for a context with a uid), and MODIFY_QP's state table
// (qp.Validate, the qp package's copy of ib_modify_qp_is_ok) and ranges.
//
// # Address handles
//
// CREATE_AH (write path) and its ioctl DESTROY (UVERBS_METHOD_AH_DESTROY,
// which libibverbs tries before the write DESTROY_AH) follow
// ib_uverbs_create_ah and mlx5_ib_create_ah (ah.go): port 1 only; on RoCE
// the address must carry a GRH (EINVAL) whose sgid_index names a GID of
// the table (EINVAL), and the driver response must have room for the MAC
// (EINVAL). The answer (struct mlx5_ib_create_ah_resp) carries the
// destination MAC as ib_resolve_eth_dmac finds it: a multicast GID's
// multicast MAC (IPv6 33:33:..., IPv4-mapped 01:00:5e:...), a link-local
// GID's EUI-64 MAC (rdma_get_ll_mac), and, for any other unicast GID, the
// neighbour lookup, which the fake answers only for the port's own
// addresses (the loopback route: the netdev's MAC, the one GID 0 carries;
// b8:ce:f6:a1:b2:c4 for cx6.json) and refuses with EHOSTUNREACH
// otherwise. libmlx5 puts that MAC in every UD WQE's address vector.
//
// # XRC
//
// OPEN_XRCD (write path) makes a new domain only (fd -1 with O_CREAT;
// sharing a domain through a file's inode is refused with EOPNOTSUPP), on
// a profile whose device_cap_flags has IB_DEVICE_XRC; its ioctl destroy
// refuses a domain still in use (EBUSY). An XRC SRQ must name its domain
// and CQ, and takes the user index of its driver data as
// get_srq_user_index does (required and not the default under CQE
// version 1; a basic SRQ's is never read). An XRC_INI QP takes no SRQ and
// has no receive queue or receive CQ; an XRC_TGT QP takes the domain and
// nothing else (no PD, CQ or indirection table: EINVAL), and its driver
// data, if any, is ignored, as ib_create_qp passes mlx5_ib none.
//
// # Profile switches beyond the default
//
// With "dyn_uar" false the kernel answers GET_CONTEXT as mlx5_ib does for a
// device without UAR objects: it allocates the static UAR pages the request
// asks for (MLX5_IB_MMAP_REGULAR_PAGE offsets) and gives each QP a
// BlueFlame register as alloc_bfreg does (low-latency ones first, then the
// least used medium one, then register 0), named in QP_CREATE's
// bfreg_index and returned on destroy. With "devx" true it answers DEVX's
// QUERY_HCA_CAP with status 0 and a page of zeros: a device with none of
// the optional features libmlx5 reads there, all of them mlx5dv ones;
// other DEVX commands stay refused. With "no_verbs_ioctl" true every
// RDMA_VERBS_IOCTL fails with ENOTTY, as on a kernel without the ioctl
// interface; the legacy write GET_CONTEXT that libibverbs then sends is not
// emulated.
//
// # Numbering
//
// Handles are per object type and per file, lowest free first (the kernel
// uses one space for all of a file's objects; per type keeps handles
// equal when the drivers allocate UARs at different moments). QPNs, CQNs,
// PDNs, mkeys and hardware UAR indexes are device-wide, counted from the
// profile's bases, so two runs of one program number alike.
//
// # The device file's pages
//
// Offsets are mlx5_ib's mmap offsets and equal offsets in the file's
// memfd (DevMemSize bytes): dynamic UAR n of a context at page 0x900+n
// (mlx5_entry_to_mmap_offset of entry 9<<16|n), the core clock page at
// page 0x500 (MLX5_IB_MMAP_CORE_CLOCK<<8) holding Profile.CoreClock big
// endian at hca_core_clock_offset, and struct mlx5_ib_clock_info at page
// 0x700 (MLX5_IB_MMAP_CLOCK_INFO<<8). A QP's BlueFlame registers are at
// UAR+0x800 and UAR+0x900 (bf_reg_size 256, two halves each); with
// dynamic UARs the kernel knows only the page, the driver picks the
// register.
//
// # Files
//
// The async event file and completion channels must be real descriptors
// in the target: the kernel asks Kernel.NewFD, which the supervisor
// implements with SECCOMP_IOCTL_NOTIF_ADDFD of an eventfd.
//
// # The profile (testdata/cx6.json)
//
// A ConnectX-6 (MT4123, PCI 15b3:101b) on RoCE, firmware 20.31.1014, as
// ibv_devinfo -v reports such a card under Linux 6.x and rdma-core 44:
//
//   - device: ib_uverbs_query_device_resp. vendor_id 0x2c9 and
//     vendor_part_id 4123 are what mlx5_ib reports (the IEEE OUI, the PCI
//     device id); max_qp 2^18, max_qp_wr 32768 (1<<log_max_qp_sz 15),
//     max_sge 30, max_cqe 4194303 (2^22-1), max_cq/mr/pd/mw 2^24,
//     max_qp_rd_atom 16, max_res_rd_atom 4194304, max_srq_wr 32767,
//     max_srq_sge 31, max_pkeys 128, local_ca_ack_delay 16,
//     device_cap_flags 0xed721c36, atomic_cap ATOMIC_HCA: the values a
//     CX-6 shows in ibv_devinfo -v. max_mr_size and page_size_cap as
//     mlx5_ib sets them (~0ull, ~(MLX5_ADAPTER_PAGE_SIZE-1)).
//   - device_ex: completion timestamp mask 2^63-1, hca_core_clock 156250
//     kHz, device_cap_flags_ex 0x30000055ed721c36, RSS caps for raw
//     packet QPs, tag matching and CQ moderation caps, max_dm_size 128 KiB
//     (ibv_devinfo -v of a CX-6). ODP is off (general_caps 0), so REG_MR
//     with IBV_ACCESS_ON_DEMAND is refused.
//   - port: ACTIVE, LinkUp, Ethernet (link_layer 2), max_mtu 4096,
//     active_mtu 1024, gid_tbl_len 256, pkey_tbl_len 1, port_cap_flags
//     CM_SUP|IP_BASED_GIDS (0x04010000, what mlx5 reports on RoCE),
//     active_width 2X, active_speed HDR (sysfs's "100 Gb/sec (2X HDR)").
//     The GID table: 0 the link-local RoCE v1 entry, 1 RoCE v2
//     ::ffff:10.0.0.1; the rest empty (QUERY_GID_ENTRY: ENODATA).
//   - mlx5_context: mlx5_ib_alloc_ucontext's answer for a CX-6 on 4 KiB
//     pages: qp_tab_size 1<<log_max_qp 18, bf_reg_size 256 (1<<log_bf_reg_size),
//     cache_line_size 64, max_sq_desc_sz 1024 and max_rq_desc_sz 512
//     (max_wqe_sz_sq/_rq), max_send_wqebb/max_recv_wr/max_srq_recv_wr
//     32768 (1<<log_max_qp_sz, log_max_srq_sz), comp_mask CORE_CLOCK_OFFSET|
//     DUMP_FILL_MKEY|SQD2RTS (ECE added with "ece"), cmds_supp_uhw
//     QUERY_DEVICE|CREATE_AH (RoCE), eth_min_inline 1 (MLX5_USER_INLINE_MODE_NONE+1:
//     ConnectX-5 and later need no inline headers), clock_info_versions
//     1 (V1), log_uar_size 12 and num_uars_per_page 1 (4 KiB UARs on 4 KiB
//     pages). The kernel computes tot_bfregs (0 with dynamic UARs),
//     cqe_version (min of the request and "cqe_version") and
//     response_length.
//   - switches: dyn_uar (grant MLX5_LIB_CAP_DYN_UAR), devx_uctx (accept
//     MLX5_IB_ALLOC_UCTX_DEVX, as a CX-6 with log_max_uctx does), devx
//     (answer DEVX general commands; false: EOPNOTSUPP, which libmlx5
//     tolerates), ece, cqe_version 1, log_max_cq_sz 22, log_max_qp_sz 15.
//   - numbering bases: qpn_base 0x1100, cqn_base 0x400, mkey_base 0x1000,
//     uar_index_base 0x100, pdn_base 0x10: made up, in the ranges real
//     devices hand out.
package fake
