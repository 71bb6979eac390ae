package uverbs

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdma/provider"
)

// RTValues are the device's clock values at one moment (struct
// ibv_values_ex).
type RTValues struct {
	// RawClock is the device's free-running clock, in cycles
	// (IBV_VALUES_MASK_RAW_CLOCK): the clock completion timestamps count,
	// DeviceAttr.CompletionTimestampMask wide, ticking at
	// DeviceAttr.HCACoreClock kHz.
	RawClock uint64
}

// QueryRTValues reads the device's clock now (ibv_query_rt_values_ex).
// A device whose provider cannot read it fails with an error that matches
// unix.EOPNOTSUPP and errors.ErrUnsupported: rxe, which has no clock of
// its own, and an mlx5 device whose kernel maps no core clock page.
func (c *Context) QueryRTValues() (RTValues, error) {
	const op = "query rt values"
	clk, err := c.clock(op)
	if err != nil {
		return RTValues{}, err
	}
	v, err := clk.ReadClock()
	if err != nil {
		return RTValues{}, c.clockErr(op, err)
	}
	return RTValues{RawClock: v}, nil
}

// TimestampTime converts a completion timestamp (wr.Completion.Timestamp)
// to wall time with the clock parameters the kernel keeps for the device,
// as mlx5dv_ts_to_ns does with the clock info page: exact for a timestamp
// within half the clock's range of the kernel's last update of them, which
// it makes well inside that. Devices without them fail as QueryRTValues
// does; EBUSY means the kernel was rewriting them throughout.
func (c *Context) TimestampTime(ts uint64) (time.Time, error) {
	const op = "convert timestamp"
	clk, err := c.clock(op)
	if err != nil {
		return time.Time{}, err
	}
	ns, err := clk.TimestampNS(ts)
	if err != nil {
		return time.Time{}, c.clockErr(op, err)
	}
	return time.Unix(0, int64(ns)), nil
}

// clock returns the provider's clock, or the error for a context without
// one or a closed context.
func (c *Context) clock(op string) (provider.Clock, error) {
	if c == nil {
		return nil, errNil
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	clk, ok := c.prov.(provider.Clock)
	if !ok {
		return nil, &Error{Op: op, Err: fmt.Errorf("device %s (driver %s) has no clock rdmago can read: %w", c.dev.Name, c.dev.Driver, unix.EOPNOTSUPP)}
	}
	return clk, nil
}

// clockErr wraps a provider's clock error; a context closed meanwhile
// (whose provider unmapped the clock) answers ErrClosed.
func (c *Context) clockErr(op string, err error) error {
	if c.isClosed() {
		return ErrClosed
	}
	return &Error{Op: op, Err: err}
}

// isClosed reports whether the context's Close has begun.
func (c *Context) isClosed() bool {
	c.reg.mu.Lock()
	defer c.reg.mu.Unlock()
	return c.reg.closed
}
