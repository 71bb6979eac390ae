// Package rsocket is a net.Conn and net.Listener over RDMA, speaking
// librdmacm's rsocket protocol, so that Go programs and C programs built
// on rsockets (rstream, programs under librspreload.so) talk to each
// other. riostream is not a peer: its transfers need rsockets' iomap
// extension, which this package does not offer (docs/rsocket.md).
//
// A connection is an rdma_cm connection of a reliable QP. Each side
// registers a receive ring and tells the peer where it is in the
// connection's private data; a Write copies the bytes into a registered
// send buffer and RDMA-writes them straight into the peer's ring, with a
// 32-bit immediate that says how many bytes came. Credits (receive queue
// entries and ring space) flow back the same way, and SHUTDOWN and
// DISCONNECT control messages end the stream. docs/rsocket.md describes
// the protocol as implemented and what is and is not supported.
//
// Listen, Dial, Dialer and ListenConfig mirror package net's; the networks
// are "rdma", "rdma4" and "rdma6", and addresses are host:port on an
// interface that has an RDMA device (soft-RoCE included). Deadlines are
// real: a blocked Read or Write waits on the completion channel in the
// runtime poller and returns os.ErrDeadlineExceeded when its deadline
// passes, or net.ErrClosed when the Conn is closed.
//
// Failures to connect come back as *net.OpError wrapping the errno package
// net would give: syscall.ECONNREFUSED when nothing listens,
// syscall.ENETUNREACH or syscall.EHOSTUNREACH when the address cannot be
// reached, and syscall.ENODEV when no RDMA device serves the route or the
// host has no RDMA at all (an error that then also matches
// uverbs.ErrNoDevice and names the module to load).
// A peer that breaks the protocol (a malformed
// message, credits it did not have, private data of another version) ends
// the connection with an error; it cannot make this side read or write
// outside its registered buffers.
package rsocket
