package pingpong

// The end race of the pingpong protocol on rxe.
//
// The client's last step is to receive the server's last message; then it
// destroys its QP and exits. The server's last step is the completion of
// that message's send, which needs the client's ACK. rxe's responder
// posts the receive's completion before it sends the ACK, so a client
// that polls it and destroys its QP at once can leave the ACK unsent; on
// hardware the window is far smaller, and rdma-core's own client exits
// the same way. The server then retransmits to a QP that is gone. With
// rc_pingpong's retry_cnt of 7 a device would fail the send with "transport
// retry counter exceeded" after 8 timeouts, but rxe's completer decrements
// the count only when it is not 7: the server retransmits forever.
//
// runPP tells that apart from a hang of ours by what the kernel shows of
// the server while it still runs: each of its QPs still in RTS, having
// received every packet the client sent (rq-psn past the client's first
// PSN by all of them, and still), and rxe counting retries all along.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdma/internal/rdmatest"
)

// endRaceWait bounds how long the server may take to end after its client
// did; it sends nothing more, so only a lost ACK keeps it.
const endRaceWait = 20 * time.Second

// resQP is a QP as "rdma res show qp" lists it.
type resQP struct {
	lqpn  uint32
	state string
	rqPSN uint32
}

// endRaceSample is the kernel's view of the server at one moment.
type endRaceSample struct {
	qps     []resQP
	retries uint64 // rxe's completer_retry_err
}

// sampleEndRace reads the QPs of process pid and rxe's retry count.
func sampleEndRace(dev string, pid int) (endRaceSample, error) {
	var s endRaceSample
	// rdma res names the thread that made an object, not its process.
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return s, err
	}
	tids := map[string]bool{}
	for _, t := range tasks {
		tids[t.Name()] = true
	}
	out, err := exec.Command("/usr/bin/rdma", "res", "show", "qp").CombinedOutput()
	if err != nil {
		return s, fmt.Errorf("rdma res show qp: %v: %s", err, out)
	}
	if s.qps, err = parseResQPs(string(out), tids); err != nil {
		return s, err
	}
	s.retries, err = rdmatest.HWCounter(dev, "completer_retry_err")
	return s, err
}

// parseResQPs returns the QPs that threads tids made, from rdma res show
// qp's output.
func parseResQPs(out string, tids map[string]bool) ([]resQP, error) {
	var qps []resQP
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		kv := map[string]string{}
		for i := 0; i+1 < len(f); i++ {
			kv[f[i]] = f[i+1]
		}
		if !tids[kv["pid"]] {
			continue
		}
		var q resQP
		q.state = kv["state"]
		for _, n := range []struct {
			key string
			v   *uint32
		}{{"lqpn", &q.lqpn}, {"rq-psn", &q.rqPSN}} {
			v, err := strconv.ParseUint(kv[n.key], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("QP line %q: %s: %v", line, n.key, err)
			}
			*n.v = uint32(v)
		}
		qps = append(qps, q)
	}
	return qps, nil
}

// ppAddr is an address line's QPN and PSN.
type ppAddr struct{ qpn, psn uint32 }

// parseAddrs returns the local and remote address lines a side printed.
func parseAddrs(out string) (local, remote []ppAddr) {
	for _, line := range strings.Split(out, "\n") {
		m := ppAddrRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		qpn, _ := strconv.ParseUint(m[3], 16, 32)
		psn, _ := strconv.ParseUint(m[4], 16, 32)
		a := ppAddr{uint32(qpn), uint32(psn)}
		if m[1] == "local" {
			local = append(local, a)
		} else {
			remote = append(remote, a)
		}
	}
	return local, remote
}

// judgeEndRace says whether two samples of a server that outlived its
// client, a second apart, show the end race: every QP the server printed
// is in RTS in both, has received packets packets in all from the
// client's first PSNs on and nothing since, and rxe retried meanwhile.
// The error says what does not fit.
func judgeEndRace(first, second endRaceSample, local, remote []ppAddr, packets uint32) error {
	if len(local) == 0 || len(local) != len(remote) {
		return fmt.Errorf("the server printed %d local and %d remote addresses", len(local), len(remote))
	}
	var received uint32
	for i, l := range local {
		var qs [2]*resQP
		for j, s := range []endRaceSample{first, second} {
			for k := range s.qps {
				if s.qps[k].lqpn == l.qpn {
					qs[j] = &s.qps[k]
				}
			}
			if qs[j] == nil {
				return fmt.Errorf("the server's QP %d is not listed", l.qpn)
			}
			if qs[j].state != "RTS" {
				return fmt.Errorf("the server's QP %d is in %s", l.qpn, qs[j].state)
			}
		}
		if qs[0].rqPSN != qs[1].rqPSN {
			return fmt.Errorf("the server's QP %d still receives (rq-psn %d, then %d)", l.qpn, qs[0].rqPSN, qs[1].rqPSN)
		}
		received += (qs[0].rqPSN - remote[i].psn) & 0xffffff
	}
	if received != packets {
		return fmt.Errorf("the server received %d packets, want all %d", received, packets)
	}
	if second.retries <= first.retries {
		return fmt.Errorf("rxe retried nothing (completer_retry_err %d, then %d)", first.retries, second.retries)
	}
	return nil
}
