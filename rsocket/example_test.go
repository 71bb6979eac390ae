package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/rdmago/rdma/rsocket"
)

// An HTTP server whose requests and responses travel over RDMA: the
// listener is a net.Listener, so http.Serve takes it as it is. C programs
// under librspreload.so (curl, for one) and Go clients with
// rsocket.Dialer reach it.
func Example_httpServer() {
	l, err := rsocket.Listen("rdma", "10.0.2.15:8080")
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello over RDMA")
	})
	log.Fatal(http.Serve(l, nil))
}

// An HTTP client over RDMA: the transport dials with rsocket instead of
// TCP; everything above it is net/http's.
func Example_httpClient() {
	var d rsocket.Dialer
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "rdma", addr)
			if err != nil {
				return nil, err // not c: a nil *rsocket.Conn is a non-nil net.Conn
			}
			return c, nil
		},
	}}
	resp, err := client.Get("http://10.0.2.15:8080/hello")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(os.Stdout, resp.Body)
}

// A Conn is a net.Conn: deadlines, CloseWrite and io.Copy work as they do
// over TCP.
func ExampleDial() {
	c, err := rsocket.Dial("rdma", "10.0.2.15:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "ping"); err != nil {
		log.Fatal(err)
	}
	c.CloseWrite() // the peer reads io.EOF after "ping"
	reply, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", reply)
}

// ResolveAddr parses an address as net.ResolveTCPAddr does, for
// Dialer.LocalAddr; it needs no device.
func ExampleResolveAddr() {
	for _, s := range []string{"10.0.2.15:8080", "[fe80::1%eth0]:8080", ":8080"} {
		for _, network := range []string{"rdma", "rdma4"} {
			a, err := rsocket.ResolveAddr(network, s)
			fmt.Println(network, s, "→", a, err)
		}
	}
	// Output:
	// rdma 10.0.2.15:8080 → 10.0.2.15:8080 <nil>
	// rdma4 10.0.2.15:8080 → 10.0.2.15:8080 <nil>
	// rdma [fe80::1%eth0]:8080 → [fe80::1%eth0]:8080 <nil>
	// rdma4 [fe80::1%eth0]:8080 → <nil> address fe80::1%eth0: address of the wrong family for rdma4
	// rdma :8080 → [::]:8080 <nil>
	// rdma4 :8080 → 0.0.0.0:8080 <nil>
}
