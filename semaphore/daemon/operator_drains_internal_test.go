package daemon

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

// A drain of a nested name that waits only for the readers below it (its
// agents' intent-shared tickets) is a drain in progress, with them as its
// readers left; the intent tickets themselves are no drain.
func TestDrainsCountReadersBelow(t *testing.T) {
	three := 3
	tab := api.Table{Locks: []api.Lock{{Name: "/site", Entries: []api.Entry{
		{Request: "1.1.1", Mode: "intent-shared", Ticket: 1, Holder: true, Active: true, Readers: &three},
		{Request: "2.1.1", Mode: "intent-shared", Ticket: 2, Holder: true},
		{Request: "3.1.1", Mode: "intent-exclusive", Ticket: 3, Holder: true},
		{Request: "4.1.1", Mode: "read-write-priority", Ticket: 4, Reason: "upgrade"},
	}}}}
	got := drains(tab, time.Now())
	if len(got) != 1 || got[0].Request != "4.1.1" || got[0].Readers != 4 {
		t.Fatalf("drains %+v, want the one of 4.1.1 with 4 readers left", got)
	}
}
