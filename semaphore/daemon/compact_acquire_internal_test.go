package daemon

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/api"
)

// TestCompactAcquireReadsAsHTTP: an acquire of the compact protocol is
// read by ParseAcquire, as its HTTP body is: the same defaults (a timeout
// of 0 is a try in both), the same request, the same refusals.
func TestCompactAcquireReadsAsHTTP(t *testing.T) {
	for _, c := range []struct {
		req  api.CompactRequest
		body api.AcquireBody
	}{
		{api.CompactRequest{Name: "/a"}, api.AcquireBody{Name: "/a", Timeout: "0s"}},
		{api.CompactRequest{Name: "/a", Timeout: api.DefaultTimeout}, api.AcquireBody{Name: "/a"}},
		{api.CompactRequest{Name: "/a", Try: true}, api.AcquireBody{Name: "/a", Try: true, Timeout: "0"}},
		{api.CompactRequest{Name: "/a", Mode: "read-only", Timeout: time.Second, Duration: 5 * time.Second, Limit: 3},
			api.AcquireBody{Name: "/a", Mode: "read-only", Timeout: "1s", Duration: "5s", Limit: 3}},
		{api.CompactRequest{Name: "/a", Mode: "gentle", Quiet: time.Minute, Grace: time.Second, Timeout: time.Second},
			api.AcquireBody{Name: "/a", Mode: "gentle", Quiet: "1m", Grace: "1s", Timeout: "1s"}},
		{api.CompactRequest{Name: "/a", Timeout: -time.Second}, api.AcquireBody{Name: "/a", Timeout: "-1s"}},
	} {
		got, gerr := compactAcquire(c.req)
		want, werr := ParseAcquire(c.body)
		if gerr != nil || werr != nil || got != want {
			t.Errorf("%+v: compact %+v %v, HTTP %+v %v", c.req, got, gerr, want, werr)
			continue
		}
		if (got.Validate() == nil) != (want.Validate() == nil) {
			t.Errorf("%+v: the checks differ", c.req)
		}
	}
	if _, err := compactAcquire(api.CompactRequest{Name: "/a", Mode: "sideways"}); !errors.Is(err, codes.ErrInvalid) {
		t.Errorf("an unknown mode: %v, want ErrInvalid", err)
	}
}
