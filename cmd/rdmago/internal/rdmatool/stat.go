package rdmatool

import (
	"io"

	"github.com/rdmago/rdma/internal/abi"
)

// rdma statistic: the hardware counters of each port.

func (r *rd) cmdStat() error {
	return r.exec([]sub{
		{"", r.statShow}, {"show", r.statShow}, {"list", r.statShow}, {"help", r.statHelp},
		{"qp", r.unsupported("rdma statistic qp")}, {"mode", r.unsupported("rdma statistic mode")},
		{"set", r.unsupported("rdma statistic set")}, {"unset", r.unsupported("rdma statistic unset")},
	}, "statistic command")
}

func (r *rd) statHelp() error {
	io.WriteString(r.stdout, `Usage: rdma [ OPTIONS ] statistic { COMMAND | help }
       rdma statistic OBJECT show
       rdma statistic OBJECT show link [ DEV/PORT_INDEX ] [ FILTER-NAME FILTER-VALUE ]
       rdma statistic OBJECT mode
       rdma statistic OBJECT set COUNTER_SCOPE [DEV/PORT_INDEX] auto {CRITERIA | off}
       rdma statistic OBJECT bind COUNTER_SCOPE [DEV/PORT_INDEX] [OBJECT-ID] [COUNTER-ID]
       rdma statistic OBJECT unbind COUNTER_SCOPE [DEV/PORT_INDEX] [COUNTER-ID]
       rdma statistic show
       rdma statistic show link [ DEV/PORT_INDEX ]
       rdma statistic mode [ supported ]
       rdma statistic mode [ supported ] link [ DEV/PORT_INDEX ]
       rdma statistic set link [ DEV/PORT_INDEX ] optional-counters [ OPTIONAL-COUNTERS ]
       rdma statistic unset link [ DEV/PORT_INDEX ] optional-counters
where  OBJECT: = { qp }
       CRITERIA : = { type }
       COUNTER_SCOPE: = { link | dev }
       FILTER_NAME: = { cntn | lqpn | pid }
Examples:
       rdma statistic qp show
       rdma statistic qp show link mlx5_2/1
       rdma statistic qp mode
       rdma statistic qp mode link mlx5_0
       rdma statistic qp set link mlx5_2/1 auto type on
       rdma statistic qp set link mlx5_2/1 auto off
       rdma statistic qp bind link mlx5_2/1 lqpn 178
       rdma statistic qp bind link mlx5_2/1 lqpn 178 cntn 4
       rdma statistic qp unbind link mlx5_2/1 cntn 4
       rdma statistic qp unbind link mlx5_2/1 cntn 4 lqpn 178
       rdma statistic show
       rdma statistic show link mlx5_2/1
       rdma statistic mode
       rdma statistic mode link mlx5_2/1
       rdma statistic mode supported
       rdma statistic mode supported link mlx5_2/1
       rdma statistic set link mlx5_2/1 optional-counters cc_rx_ce_pkts,cc_rx_cnp_pkts
       rdma statistic unset link mlx5_2/1 optional-counters
`)
	return nil
}

func (r *rd) statShow() error {
	link := func() error { return r.execLink(r.statOneLink, false) }
	return r.exec([]sub{
		{"", link}, {"link", link}, {"mr", r.unsupported("rdma statistic mr")}, {"help", r.statHelp},
	}, "parameter")
}

func (r *rd) statOneLink() error {
	if r.port == 0 {
		return nil
	}
	as, err := r.request(abi.RDMA_NLDEV_CMD_STAT_GET, 0, r.devEncoder(true))
	if err != nil {
		return err
	}
	p := r.p
	for _, a := range as {
		if !a.has(abi.RDMA_NLDEV_ATTR_DEV_NAME) || !a.has(abi.RDMA_NLDEV_ATTR_PORT_INDEX) || !a.has(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTERS) {
			continue
		}
		hw, err := a.entries(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTERS)
		if err != nil {
			r.errf("error: %v\n", err)
			return errFailed
		}
		p.openObject()
		p.str(anyO, "ifname", "link %s/", a.str(abi.RDMA_NLDEV_ATTR_DEV_NAME))
		p.uint(anyO, "port", "%d ", a.uint(abi.RDMA_NLDEV_ATTR_PORT_INDEX))
		for _, c := range hw {
			if !c.has(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME) || !c.has(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE) {
				r.errf("error: a counter without name or value\n")
				return errFailed
			}
			if r.pretty && !r.json {
				p.w.WriteString("\n    ")
			}
			n := c.str(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME)
			p.uint(anyO, n, n+" %d ", c.uint(abi.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE))
		}
		p.newline()
	}
	return nil
}
