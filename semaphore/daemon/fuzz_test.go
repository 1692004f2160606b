package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// FuzzAPIRequest sends arbitrary bodies to every endpoint that reads one,
// on an agent's handler with no node behind it: parsing must answer 4xx
// with a JSON error, or reach the node (and get 503 not_ready from the
// stopped loop), and never panic.
func FuzzAPIRequest(f *testing.F) {
	for _, r := range []api.CompactRequest{{Op: api.OpReleaseNoReply, Lease: "1.1.1", Name: "/a"},
		{Op: api.OpAcquire, Name: "/a", Mode: "read-only", Try: true}, {Op: api.OpAcquire, Name: "/a", Timeout: time.Second},
		{Op: api.OpRelease, Lease: "1.1.1"}, {Op: api.OpRenew, Lease: "1.1.1", Name: "/a", Mode: "gentle"}} {
		f.Add(string(api.AppendRequest(api.AppendRequest(nil, &r), &api.CompactRequest{Op: api.OpRelease, Lease: "2.1.1"})))
	}
	for _, s := range []string{`{"name":"/a"}`, `{"name":"/a","mode":"read-only","timeout":"1s","duration":"1m","grace":"1s","quiet":"1s","limit":2,"try":true}`,
		`{"lease":"1.1.1"}`, `{"name":"/a","token":3}`, `{"name":"/a","lease":"2.1.1"}`, `{`, `[]`, `null`, `{"name":"\u0000"}`,
		`{"name":"/a","timeout":"-1s"}`, `{"name":"/a","duration":"9999999h"}`} {
		f.Add(s)
	}
	node, err := daemon.NewNode(daemon.NodeConfig{Self: 1, Bootstrap: []wire.NodeID{1}, Transport: &loneTransport{}, Store: &diskTwin{durable: core.NewDurable()},
		ID: idFor(1), State: stateFor()})
	if err != nil {
		f.Fatal(err)
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	_ = node.Run(stopped) // returns at once: every call after it gets ErrStopped
	h := daemon.NewAPI(daemon.APIConfig{Node: node})
	f.Fuzz(func(t *testing.T, body string) {
		b, err := daemon.ParseAcquire(api.AcquireBody{Name: body, Mode: body, Timeout: api.Span(body), Duration: api.Span(body)})
		if err == nil {
			err = b.Validate()
		}
		if err == nil {
			if b.Duration <= 0 || b.Timeout < 0 {
				t.Fatalf("ParseAcquire and Validate let %q through as %+v", body, b)
			}
		} else if !errors.Is(err, codes.ErrInvalid) {
			t.Fatalf("ParseAcquire(%q): %v is not ErrInvalid", body, err)
		}
		for _, path := range []string{"/v1/acquire", "/v1/release", "/v1/renew", "/v1/force-unlock"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			if w.Code == http.StatusOK || !strings.Contains(w.Body.String(), `"error"`) {
				t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body.String())
			}
		}
		// The same bytes as the compact frames of a connection of either
		// version: every answer is a well-formed frame with an error (the
		// node is stopped), a release without an answer gets none, and
		// the connection ends.
		for _, version := range []int{1, 2} {
			br := bufio.NewReader(bytes.NewReader(daemon.ServeCompact(node, []byte(body), version)))
			for {
				reply, err := api.ReadReply(br)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil || reply.Error == "" {
					t.Fatalf("compact version %d %x: answer %+v, %v", version, body, reply, err)
				}
			}
		}
	})
}
