// Package cm is the RDMA connection manager: librdmacm's rdma_cm API and
// its rdma_verbs.h calls, in Go, over /dev/infiniband/rdma_cm (the kernel's
// "ucma" write ABI, version 4) with no C library.
//
// An ID (struct rdma_cm_id) is the analogue of a socket: it is bound to an
// address, resolves a peer's address and route, listens, connects,
// accepts and disconnects, and owns a queue pair created on the RDMA
// device its address belongs to. Names follow librdmacm so C code ports
// line by line:
//
//	rdma_create_event_channel  NewEventChannel
//	rdma_create_id             CreateID
//	rdma_bind_addr             ID.BindAddr
//	rdma_resolve_addr          ID.ResolveAddr
//	rdma_resolve_route         ID.ResolveRoute
//	rdma_listen                ID.Listen
//	rdma_get_cm_event          EventChannel.GetEvent
//	rdma_ack_cm_event          Event.Ack
//	rdma_create_qp             ID.CreateQP
//	rdma_connect, rdma_accept  ID.Connect, ID.Accept
//	rdma_reject                ID.Reject
//	rdma_disconnect            ID.Disconnect
//	rdma_destroy_id            ID.Close
//	rdma_destroy_ep            ID.Close
//	rdma_getaddrinfo           GetAddrInfo
//	rdma_create_ep             CreateEP
//	rdma_get_request           ID.GetRequest
//	rdma_post_send, …          ID.PostSend, … (see docs/rdma_verbs.md)
//
// Calls that wait take a context.Context; an asynchronous ID's operations
// report their outcome as events on its EventChannel, and a synchronous
// ID's (created without a channel) wait for their event and return it as
// an error. When the context ends first, the call returns an error that
// wraps the context's (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded). A completion's error (ID.GetSendComp,
// GetRecvComp) is a *wr.CompletionError, which matches its status's errno
// and, for a flushed request, wr.ErrFlushed. Errors wrap the kernel's errno (see Error): test them with
// errors.Is(err, unix.ECONNREFUSED) and the like. On a host without the
// connection manager (the rdma_ucm module not loaded, or no RDMA modules at
// all) every call that needs it fails with an error matching
// syscall.ENODEV, as librdmacm's do there, and uverbs.ErrNoDevice; its text
// names the module to load.
//
// The device an ID is bound to is opened with package uverbs, once per
// device for all IDs, with one protection domain (ID.Verbs, ID.PD), and
// kept open for the life of the process, as librdmacm keeps its device
// contexts: what a program makes on them outlives the IDs.
//
// Where this package differs from librdmacm, it is so that nothing waits
// for ever on a connection that is gone:
//
//   - ID.Close does not wait for the ID's events to be acknowledged;
//     Event.Ack only counts.
//   - A synchronous operation answered by an event it does not expect
//     fails (DISCONNECTED: ECONNRESET; others: EPROTO) instead of
//     succeeding because the event's status is 0.
//   - The completion waits of synchronous IDs watch their rdma_cm
//     channel, and the peer's DISCONNECTED moves the QP to the error state
//     a second after it is processed, so outstanding work completes,
//     flushed, instead of waiting for the transport's retries, even for a
//     program that polls its CQs itself (see docs/rdma_verbs.md).
//   - Close also destroys the QP, CQs and SRQ made on the ID.
//   - An ID or event channel dropped without Close is released
//     when the garbage collector finds it unreachable, and every method of
//     a destroyed ID or closed channel returns ErrClosed, which matches
//     net.ErrClosed.
package cm
