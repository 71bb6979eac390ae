package valkeyrdma_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net"

	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"

	"github.com/rdmago/rdma/valkeyrdma"
)

// go-redis reaches valkey-server's RDMA listener (valkey-server
// --rdma-bind 10.0.2.15 --rdma-port 6379) through its Dialer option.
func Example_goRedis() {
	var d valkeyrdma.Dialer
	rdb := redis.NewClient(&redis.Options{
		Addr:   "10.0.2.15:6379",
		Dialer: d.DialContext,
	})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "greeting", "hello over RDMA", 0).Err(); err != nil {
		log.Fatal(err)
	}
	v, err := rdb.Get(ctx, "greeting").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v)
}

// valkey-go reaches valkey-server's RDMA listener through its DialCtxFn
// option.
func Example_valkeyGo() {
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress: []string{"10.0.2.15:6379"},
		DialCtxFn: func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return valkeyrdma.DialContext(ctx, "tcp", addr)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	if err := client.Do(ctx, client.B().Incrby().Key("visits").Increment(41).Build()).Error(); err != nil {
		log.Fatal(err)
	}
	n, err := client.Do(ctx, client.B().Incr().Key("visits").Build()).AsInt64()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n)
}

// A server in Go that Valkey's RDMA clients reach: it answers PING.
func ExampleListen() {
	l, err := valkeyrdma.Listen("rdma", "10.0.2.15:6380")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				// Each PING arrives as *1\r\n$4\r\nPING\r\n: three lines.
				for range 3 {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
				}
				if _, err := c.Write([]byte("+PONG\r\n")); err != nil {
					return
				}
			}
		}()
	}
}
