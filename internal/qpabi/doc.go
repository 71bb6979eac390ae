// Package qpabi turns package qp's attributes into the kernel's structs and
// back: the uverbs modify and query commands (struct ib_uverbs_ex_modify_qp,
// ib_uverbs_query_qp_resp) and the attributes rdma_ucm's INIT_QP_ATTR
// answers with (struct ib_uverbs_qp_attr). It is internal: programs set
// qp.Attr and call uverbs.QP.Modify; only the packages that talk to the
// kernel encode.
package qpabi
