// Package uverbs is the RDMA verbs: libibverbs' ibv_* calls in Go, spoken
// straight to the kernel's /dev/infiniband/uverbsN with no C library.
//
// A program finds a device (Devices, Open), allocates a protection domain
// (Context.AllocPD), registers memory with it (PD.RegMR), makes completion
// queues (Context.CreateCQ) and queue pairs (PD.CreateQP), moves each queue
// pair through its states (QP.Modify, with the attributes package qp
// builds), and then posts work requests (QP.PostSend, QP.PostRecv, with
// the values of package wr) and polls their completions (CQ.Poll), or waits
// for them: CQ.Wait polls, arms and blocks on the CQ's completion channel
// in the runtime poller, allocating nothing, and ends with its context;
// CompChannel.GetEvent and CQ.ReqNotify are there for programs that
// arrange the wait themselves. Connection setup over IP is package cm's
// (rdma_cm); memory helpers are package mr's.
//
// The control path (creating and destroying objects, modifying and
// querying them) uses the kernel's ioctl interface (RDMA_VERBS_IOCTL) and,
// where the kernel offers only that, its legacy write commands. The data
// path is the device's provider, chosen from the driver the kernel names:
// the rings and doorbells of soft-RoCE (package provider/rxe) or of mlx5
// adapters (package provider/mlx5), mapped into the process and written by
// Go code. docs/abi-path.md follows one call from Go to the kernel.
//
// # Objects and their lifetime
//
// Every object has a Close method that destroys it in the kernel and
// releases its mappings; Close is idempotent, and every later use returns
// an error matching ErrClosed (which matches net.ErrClosed too). An object
// dropped without Close releases itself once the garbage collector finds
// it unreachable, and a registered memory region keeps its memory alive
// until then, so the device never writes memory the program has let go.
// Closing a Context releases everything made on it.
//
// # Goroutines
//
// Every method may be called from any number of goroutines. Posting takes
// one lock, the provider's queue lock; polling takes the completion
// queue's close lock and the provider's. A queue pair or completion queue
// created with SingleThreaded (the promise an rdma-core thread domain
// makes: one goroutine at a time, never concurrently with Close) takes
// none. Posting and polling allocate
// nothing. docs/performance.md measures both against rdma-core.
//
// # Errors
//
// Failures are *Error values naming the verb, and a refused work request
// is a *PostError naming its index in the list; both wrap the kernel's or
// the provider's errno, so errors.Is(err, unix.ENOMEM) tells a full queue
// and errors.Is(err, unix.EINVAL) a malformed request.
package uverbs
