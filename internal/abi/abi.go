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
	return (*IbUverbsAttrAttrDataEnumData)(unsafe.Pointer(&a.Attr_data))
}

// Rdma is the wr.rdma variant of an RDMA read or write request.
func (w *IbUverbsSendWr) Rdma() *IbUverbsSendWrWrRdma {
	return (*IbUverbsSendWrWrRdma)(unsafe.Pointer(&w.Wr))
}

// Atomic is the wr.atomic variant of an atomic request.
func (w *IbUverbsSendWr) Atomic() *IbUverbsSendWrWrAtomic {
	return (*IbUverbsSendWrWrAtomic)(unsafe.Pointer(&w.Wr))
}

// Ud is the wr.ud variant of a UD send.
func (w *IbUverbsSendWr) Ud() *IbUverbsSendWrWrUd {
	return (*IbUverbsSendWrWrUd)(unsafe.Pointer(&w.Wr))
}

// Flush is the wr.flush variant of an rxe send queue entry.
func (w *RxeSendWr) Flush() *RxeSendWrWrFlush {
	return (*RxeSendWrWrFlush)(unsafe.Pointer(&w.Wr))
}

// Rdma is the wr.rdma variant of an rxe send queue entry.
func (w *RxeSendWr) Rdma() *RxeSendWrWrRdma {
	return (*RxeSendWrWrRdma)(unsafe.Pointer(&w.Wr))
}

// Atomic is the wr.atomic variant of an rxe send queue entry.
func (w *RxeSendWr) Atomic() *RxeSendWrWrAtomic {
	return (*RxeSendWrWrAtomic)(unsafe.Pointer(&w.Wr))
}

// Ud is the wr.ud variant of an rxe send queue entry.
func (w *RxeSendWr) Ud() *RxeSendWrWrUd {
	return (*RxeSendWrWrUd)(unsafe.Pointer(&w.Wr))
}

// Mw is the wr.mw variant of an rxe send queue entry.
func (w *RxeSendWr) Mw() *RxeSendWrWrMw {
	return (*RxeSendWrWrMw)(unsafe.Pointer(&w.Wr))
}
