// Package abi is the Linux kernel's RDMA user ABI as Go types and constants:
// the uverbs write and ioctl interfaces, the rdma_cm (rdma_ucm) commands,
// the rxe and mlx5 provider ABIs and RDMA netlink.
//
// Almost all of it is generated: zabi.go is rendered by
// hack/abigen/generate.sh with "go tool cgo -godefs" from the uAPI headers
// of a pinned Debian linux-libc-dev package (the version is named at the
// top of zabi.go and pinned in generate.sh). Do not edit the z*
// files; regenerate them with
//
//	make generate   (or: go generate ./internal/abi)
//
// which needs the network once (the .deb is cached under .cache/abigen),
// gcc and linux/amd64. CI runs hack/abigen/check.sh, which fails when the
// committed files differ from a fresh generation. Only the generator uses
// cgo; this package is plain Go and builds with CGO_ENABLED=0.
//
// # Naming
//
// Every C struct NAME defined in the headers (and every struct those embed
// from other uAPI headers, such as struct sockaddr_in6) is a Go type named
// by CamelCasing NAME at its underscores:
//
//	struct ib_uverbs_ioctl_hdr          IbUverbsIoctlHdr
//	struct ib_uverbs_query_port_resp_ex IbUverbsQueryPortRespEx
//	struct mlx5_ib_alloc_ucontext_req_v2 Mlx5IbAllocUcontextReqV2
//	union rxe_gid                       RxeGid
//
// with a constant SizeofNAME (SizeofIbUverbsIoctlHdr) holding C's sizeof.
// A member of anonymous struct type gets a type named after its struct and
// the member path (RxeSendWr's wr.rdma is RxeSendWrWrRdma,
// ib_uverbs_odp_caps' per_transport_caps is IbUverbsOdpCapsPerTransportCaps).
//
// Field names are the C names with the first letter upper-cased and the
// rest verbatim (object_id is Object_id, comp_mask is Comp_mask; __pad is
// X__pad). Named unions are byte arrays of the union's size (RxeSendWr.Wr,
// IbUverbsAttr.Attr_data); abi.go has accessors for the ones the library
// needs. An anonymous union is its first member (IbUverbsAttr.Data, the
// data/data_s64 union, is a uint64). Flexible array members (driver_data[],
// attrs[]) are left out; such an array starts at the Sizeof of its struct.
//
// Enumerators and integer #define constants keep their C names
// (RDMA_VERBS_IOCTL, IB_USER_VERBS_CMD_GET_CONTEXT, UVERBS_METHOD_INVOKE_WRITE)
// and are untyped constants.
//
// The structs use only fixed-width types, so the one generated file serves
// linux/amd64 and linux/arm64; TestSizes checks every type's size against C.
package abi

//go:generate ../../hack/abigen/generate.sh
