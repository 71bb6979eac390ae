// Package countingprovider is an RDMA provider written outside module
// github.com/rdmago/rdma, with only its public API, as a program that
// carries its own provider would write one. It wraps another provider and
// counts what the verbs core asks of it; registered with
// uverbs.RegisterProvider under the wrapped provider's name, it serves that
// provider's devices in its place.
//
// It uses only the base interfaces of package provider: the optional ones
// the module's own providers implement (provider.Drainer,
// provider.SendBatcher, ...) are hidden by the wrapper, so the tests show
// the core works without them.
package countingprovider

import (
	"sync/atomic"

	"github.com/rdmago/rdma/provider"
	"github.com/rdmago/rdma/qp"
	"github.com/rdmago/rdma/wr"
)

// Counts are what a Driver saw: objects made, and requests and
// completions that went through it.
type Counts struct {
	Contexts, CQs, QPs, SRQs, AHs atomic.Int64
	Sends, Recvs, Completions     atomic.Int64
}

// Driver is the wrapping provider.
type Driver struct {
	Inner  provider.Driver
	Counts *Counts
}

// Name is the wrapped provider's: the devices it serves.
func (d Driver) Name() string { return d.Inner.Name() }

// FormatFWVer is the wrapped provider's.
func (d Driver) FormatFWVer(raw uint64) string { return d.Inner.FormatFWVer(raw) }

// NewContext wraps the wrapped provider's context.
func (d Driver) NewContext(k provider.Kernel) (provider.Builder[provider.Context], error) {
	b, err := d.Inner.NewContext(k)
	if err != nil {
		return nil, err
	}
	return wrapped(b, &d.Counts.Contexts, func(c provider.Context) provider.Context {
		return &context{Context: c, n: d.Counts}
	}), nil
}

// builder passes a creation through to the wrapped builder and wraps what
// it makes.
type builder[T any] struct {
	inner provider.Builder[T]
	count *atomic.Int64
	wrap  func(T) T
}

func wrapped[T any](b provider.Builder[T], count *atomic.Int64, wrap func(T) T) provider.Builder[T] {
	return builder[T]{inner: b, count: count, wrap: wrap}
}

func (b builder[T]) Udata() (in, out []byte) { return b.inner.Udata() }
func (b builder[T]) Abort()                  { b.inner.Abort() }

func (b builder[T]) Finish(c provider.Created) (T, error) {
	v, err := b.inner.Finish(c)
	if err != nil {
		return v, err
	}
	b.count.Add(1)
	return b.wrap(v), nil
}

func same[T any](v T) T { return v }

type context struct {
	provider.Context
	n *Counts
}

func (c *context) NewCQ(cqe int) (provider.Builder[provider.CQ], error) {
	b, err := c.Context.NewCQ(cqe)
	if err != nil {
		return nil, err
	}
	return wrapped(b, &c.n.CQs, func(q provider.CQ) provider.CQ { return &cq{CQ: q, n: c.n} }), nil
}

func (c *context) NewQP(attr provider.QPInitAttr) (provider.Builder[provider.QP], error) {
	// The wrapped provider finds its own SRQ in the attributes, not ours.
	if s, ok := attr.SRQ.(*srq); ok {
		attr.SRQ = s.SRQ
	}
	b, err := c.Context.NewQP(attr)
	if err != nil {
		return nil, err
	}
	return wrapped(b, &c.n.QPs, func(q provider.QP) provider.QP { return &queuePair{QP: q, n: c.n} }), nil
}

func (c *context) NewSRQ(attr provider.SRQInitAttr) (provider.Builder[provider.SRQ], error) {
	b, err := c.Context.NewSRQ(attr)
	if err != nil {
		return nil, err
	}
	return wrapped(b, &c.n.SRQs, func(s provider.SRQ) provider.SRQ { return &srq{SRQ: s, n: c.n} }), nil
}

// NewAH passes the wrapped provider's AH through unchanged: its posts find
// it in each UD send with provider.AHValue.
func (c *context) NewAH(attr qp.AHAttr) (provider.Builder[provider.AH], error) {
	b, err := c.Context.NewAH(attr)
	if err != nil {
		return nil, err
	}
	return wrapped(b, &c.n.AHs, same[provider.AH]), nil
}

type cq struct {
	provider.CQ
	n *Counts
}

func (q *cq) Poll(wc []wr.Completion) int {
	n := q.CQ.Poll(wc)
	q.n.Completions.Add(int64(n))
	return n
}

type queuePair struct {
	provider.QP
	n *Counts
}

func (q *queuePair) PostSend(wrs []wr.SendWR) (int, error) {
	n, err := q.QP.PostSend(wrs)
	q.n.Sends.Add(int64(n))
	return n, err
}

func (q *queuePair) PostRecv(wrs []wr.RecvWR) (int, error) {
	n, err := q.QP.PostRecv(wrs)
	q.n.Recvs.Add(int64(n))
	return n, err
}

type srq struct {
	provider.SRQ
	n *Counts
}

func (s *srq) PostRecv(wrs []wr.RecvWR) (int, error) {
	n, err := s.SRQ.PostRecv(wrs)
	s.n.Recvs.Add(int64(n))
	return n, err
}
