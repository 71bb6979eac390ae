package abi

import "unsafe"

// Accessors for the named unions that godefs renders as byte arrays. Each
// returns a pointer into the receiver, so writes go to the union. The
// variants' alignments divide the union's offset (checked by the tests).

// EnumData is IbUverbsAttr's attr_data.enum_data, the element id of an
// enum attribute (UVERBS_ATTR_ENUM_IN). IbUverbsAttr.Data, the anonymous
// data/data_s64 union, is a plain uint64: an FD attribute stores the file
// descriptor as uint64(int64(fd)).
func (a *IbUverbsAttr) EnumData() *IbUverbsAttrAttrDataEnumData {
	return variant[IbUverbsAttrAttrDataEnumData](&a.Attr_data)
}

// Rdma is the wr.rdma variant of an RDMA read or write request.
func (w *IbUverbsSendWr) Rdma() *IbUverbsSendWrWrRdma { return variant[IbUverbsSendWrWrRdma](&w.Wr) }

// Atomic is the wr.atomic variant of an atomic request.
func (w *IbUverbsSendWr) Atomic() *IbUverbsSendWrWrAtomic {
	return variant[IbUverbsSendWrWrAtomic](&w.Wr)
}

// Ud is the wr.ud variant of a UD send.
func (w *IbUverbsSendWr) Ud() *IbUverbsSendWrWrUd { return variant[IbUverbsSendWrWrUd](&w.Wr) }

// Flush is the wr.flush variant of an rxe send queue entry.
func (w *RxeSendWr) Flush() *RxeSendWrWrFlush { return variant[RxeSendWrWrFlush](&w.Wr) }

// Rdma is the wr.rdma variant of an rxe send queue entry.
func (w *RxeSendWr) Rdma() *RxeSendWrWrRdma { return variant[RxeSendWrWrRdma](&w.Wr) }

// Atomic is the wr.atomic variant of an rxe send queue entry.
func (w *RxeSendWr) Atomic() *RxeSendWrWrAtomic { return variant[RxeSendWrWrAtomic](&w.Wr) }

// Ud is the wr.ud variant of an rxe send queue entry.
func (w *RxeSendWr) Ud() *RxeSendWrWrUd { return variant[RxeSendWrWrUd](&w.Wr) }

// Mw is the wr.mw variant of an rxe send queue entry.
func (w *RxeSendWr) Mw() *RxeSendWrWrMw { return variant[RxeSendWrWrMw](&w.Wr) }

// variant views the bytes of union u as its variant V.
func variant[V, U any](u *U) *V { return (*V)(unsafe.Pointer(u)) }
