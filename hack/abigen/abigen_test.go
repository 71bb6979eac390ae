package main

import (
	"slices"
	"testing"
)

func TestCamel(t *testing.T) {
	for c, want := range map[string]string{
		"ib_uverbs_ioctl_hdr":           "IbUverbsIoctlHdr",
		"ib_uverbs_query_port_resp_ex":  "IbUverbsQueryPortRespEx",
		"mlx5_ib_alloc_ucontext_req_v2": "Mlx5IbAllocUcontextReqV2",
		"__kernel_sockaddr_storage":     "KernelSockaddrStorage",
	} {
		if got := camel(c); got != want {
			t.Errorf("camel(%q) = %q, want %q", c, got, want)
		}
	}
}

// A small gcc -E -dD output: line markers, a guard, a macro, an enum, a
// struct with a named union, an anonymous union and a flexible array.
const sample = `# 1 "inc/rdma/x.h" 1
#define X_H 
#define X_MAGIC 0x1b
#define X_FN(a) ((a) + 1)
enum { X_A = (1 << 2), X_B, };
struct x_hdr {
 __u32 cq_handle;
 __u32 cqe;
 union { struct { __u8 elem_id; __u8 reserved; } enum_data; __u16 reserved; } ad;
 struct { __u32 a_b, a_c; } caps[2];
 union { __aligned_u64 data; __s64 data_s64; };
 __aligned_u64 driver_data[];
};
`

func TestScan(t *testing.T) {
	incDirs = multiFlag{"inc"}
	types, consts := scan([]byte(sample))
	var names []string
	for _, c := range consts {
		names = append(names, c.Name+"@"+c.Header)
	}
	if want := []string{"X_MAGIC@rdma/x.h", "X_A@rdma/x.h", "X_B@rdma/x.h"}; !slices.Equal(names, want) {
		t.Errorf("constants = %v, want %v", names, want)
	}
	names = nil
	for _, ty := range types {
		names = append(names, ty.Name+"="+ty.C)
	}
	want := []string{"XHdr=struct_x_hdr", "XHdrAdEnumData=abigen_XHdrAdEnumData", "XHdrCaps=abigen_XHdrCaps"}
	if !slices.Equal(names, want) {
		t.Fatalf("types = %v, want %v", names, want)
	}
	if got, want := types[2].Typedef, "typedef __typeof__(((struct x_hdr *)0)->caps[0]) abigen_XHdrCaps;"; got != want {
		t.Errorf("typedef = %q, want %q", got, want)
	}
	if got := types[0].Anon; len(got) != 1 || got[0] != (anonRef{"caps", "XHdrCaps"}) {
		t.Errorf("anon refs = %v", got)
	}

	// godefs strips the cq_ prefix (the only one: cqe, ad, ... have no
	// '_', the anonymous union is rendered as its first member, data, and
	// driver_data[] is dropped); abigen must predict that and map back to
	// the verbatim names.
	godefs, verbatim := godefsNames(types[0].Fields)
	if want := []string{"Handle", "Cqe", "Ad", "Caps", "Data", ""}; !slices.Equal(godefs, want) {
		t.Errorf("godefs names = %q, want %q", godefs, want)
	}
	if want := []string{"Cq_handle", "Cqe", "Ad", "Caps", "Data", "Driver_data"}; !slices.Equal(verbatim, want) {
		t.Errorf("verbatim names = %q, want %q", verbatim, want)
	}
	if !types[0].Fields[5].Flex {
		t.Errorf("driver_data[] not seen as a flexible array member")
	}
}
