// Package tcpexch holds the TCP connection of the out-of-band exchange
// that pingpong and perf share with the C programs: the client dials the
// first of the server's addresses that answers, the server accepts one
// client.
package tcpexch

import (
	"context"
	"net"
	"strconv"
)

// Dial connects over network ("tcp", "tcp4") to the first of hosts that
// answers on port, in order; nil if none does.
func Dial(ctx context.Context, network string, hosts []string, port int) net.Conn {
	var d net.Dialer
	for _, h := range hosts {
		if conn, err := d.DialContext(ctx, network, net.JoinHostPort(h, strconv.Itoa(port))); err == nil {
			return conn
		}
	}
	return nil
}

// Listen listens over network on port of every local address. Go sets
// SO_REUSEADDR, as the C servers do.
func Listen(ctx context.Context, network string, port int) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, network, net.JoinHostPort("", strconv.Itoa(port)))
}

// AcceptOne accepts one connection on ln, then closes ln; the end of ctx
// ends the wait.
func AcceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	return conn, err
}
