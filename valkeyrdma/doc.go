// Package valkeyrdma is Valkey's RDMA transport in Go: a net.Conn that
// speaks the protocol of valkey-server's RDMA listener (src/rdma.c,
// valkey-server --rdma-bind and --rdma-port), so that Go's Valkey and
// Redis clients reach it through their dialer hooks, and a Listener that
// accepts Valkey's RDMA clients.
//
// The transport is an RC queue pair that rdma_cm connects. Each side
// registers a receive buffer (1 MiB by default) and announces its address,
// length and rkey to the peer with a 32-byte control message
// (RegisterXferMemory). Data goes by RDMA write with immediate into the
// peer's buffer, the immediate carrying the length; once the reader has
// taken all of its buffer it announces it again, and the writer starts
// over at its beginning. A keepalive message every 3 s makes a dead peer's
// device show itself as a failed send. docs/valkey.md gives the protocol
// message by message.
//
// With go-redis:
//
//	var d valkeyrdma.Dialer
//	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379", Dialer: d.DialContext})
//
// With valkey-go:
//
//	client, err := valkey.NewClient(valkey.ClientOption{
//		InitAddress: []string{"10.0.0.1:6379"},
//		DialCtxFn: func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
//			return valkeyrdma.DialContext(ctx, "tcp", addr)
//		},
//	})
package valkeyrdma
