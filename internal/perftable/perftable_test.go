package perftable

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRows(t *testing.T) {
	out := `---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0011 PSN 0x1 RKey 0x2 VAddr 0x3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 64         5000             4.69               4.68   		   0.076725

---------------------------------------------------------------------------------------
 after the table
`
	want := [][]string{{"64", "5000", "4.69", "4.68", "0.076725"}}
	if d := cmp.Diff(want, Rows(out)); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	if rows := Rows("no table\n"); rows != nil {
		t.Errorf("rows of no table: %q", rows)
	}
}
