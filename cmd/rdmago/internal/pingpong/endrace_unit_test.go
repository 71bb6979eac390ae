package pingpong

import (
	"strings"
	"testing"
)

// The server of the end race as arm64 bookworm's CI run showed it (the
// second sample made up, a second on, as runPP would read it).
const (
	endRaceOut = `  local address:  LID 0x0000, QPN 0x00002d, PSN 0x69adcf, GID ::ffff:10.0.2.15
  remote address: LID 0x0000, QPN 0x00002e, PSN 0xd965ba, GID ::ffff:10.0.2.15
`
	endRaceQPs = `link rxe0/1 lqpn 45 rqpn 46 type RC state RTS rq-psn 14247554 sq-psn 6925975 path-mig-state MIGRATED pdn 17 pid 205 comm ibv_rc_pingpong 
link rxe0/1 lqpn 1 type GSI state RTS sq-psn 0 comm [ib_core] 
`
)

func TestJudgeEndRace(t *testing.T) {
	qps, err := parseResQPs(endRaceQPs, map[string]bool{"205": true})
	if err != nil || len(qps) != 1 || qps[0] != (resQP{45, "RTS", 14247554}) {
		t.Fatalf("parseResQPs: %+v, %v", qps, err)
	}
	local, remote := parseAddrs(endRaceOut)
	first, second := endRaceSample{qps, 100}, endRaceSample{qps, 115}
	// 50 exchanges of 4 KiB in 1 KiB packets.
	if err := judgeEndRace(first, second, local, remote, 200); err != nil {
		t.Errorf("the CI run's server: %v", err)
	}
	swap := func(q resQP) endRaceSample { return endRaceSample{[]resQP{q}, 115} }
	for _, tc := range []struct {
		name          string
		second        endRaceSample
		local, remote []ppAddr
		packets       uint32
		want          string
	}{
		{"no retries", endRaceSample{qps, 100}, local, remote, 200, "retried nothing"},
		{"a packet short", second, local, remote, 201, "received 200 packets, want all 201"},
		{"in error", swap(resQP{45, "ERR", 14247554}), local, remote, 200, "in ERR"},
		{"still receiving", swap(resQP{45, "RTS", 14247555}), local, remote, 200, "still receives"},
		{"QP gone", swap(resQP{47, "RTS", 14247554}), local, remote, 200, "not listed"},
		{"no address lines", second, nil, nil, 200, "printed 0 local"},
	} {
		err := judgeEndRace(first, tc.second, tc.local, tc.remote, tc.packets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// The count wraps at 24 bits.
	wrapped := []ppAddr{{45, 0xffffff - 99}}
	late := endRaceSample{[]resQP{{45, "RTS", 100}}, 1}
	if err := judgeEndRace(late, endRaceSample{late.qps, 2}, local, wrapped, 200); err != nil {
		t.Errorf("PSNs that wrap: %v", err)
	}
}
