package api_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore/api"
)

func TestCompactRoundTrip(t *testing.T) {
	req := api.CompactRequest{Op: api.OpAcquire, Name: "/site", Mode: "read-only", Try: true, Timeout: -time.Second,
		Duration: time.Minute, Grace: time.Millisecond, Quiet: 10 * time.Minute, Limit: 3, Lease: "1.2.3"}
	rep := api.CompactReply{Error: "draining", Message: "core: draining", TTLNanos: 42 * time.Second,
		LeaseJSON: api.LeaseJSON{Lease: "1.2.3", Name: "/site", Mode: "read-only", Token: 7}}
	b := api.AppendRequest(nil, &req)
	b = api.AppendReply(b, &rep)
	br := bufio.NewReader(bytes.NewReader(b))
	gotReq, err := api.ReadRequest(br)
	if err != nil || gotReq != req {
		t.Fatalf("request %+v %v, want %+v", gotReq, err, req)
	}
	gotRep, err := api.ReadReply(br)
	if err != nil || gotRep != rep {
		t.Fatalf("reply %+v %v, want %+v", gotRep, err, rep)
	}
	if _, err := api.ReadRequest(br); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// Releases without an answer go back to back and read as sent; the
// frame after them is the next call's.
func TestCompactReleaseNoReplyRoundTrip(t *testing.T) {
	var b []byte
	want := []api.CompactRequest{
		{Op: api.OpReleaseNoReply, Lease: "1.2.3", Name: "/site"},
		{Op: api.OpReleaseNoReply, Lease: "1.2.4", Name: "/site/shop"},
		{Op: api.OpAcquire, Name: "/site", Mode: "read-only", Try: true},
	}
	for i := range want {
		b = api.AppendRequest(b, &want[i])
	}
	br := bufio.NewReader(bytes.NewReader(b))
	for _, w := range want {
		got, err := api.ReadRequest(br)
		if err != nil || got != w {
			t.Fatalf("request %+v %v, want %+v", got, err, w)
		}
	}
	if _, err := api.ReadRequest(br); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

func TestCompactVersion(t *testing.T) {
	for _, c := range []struct {
		head string
		want int
	}{
		{string(api.CompactPreface), 1},
		{string(api.CompactPreface2), 2},
		{"\x00SLC3\r\n\r\n", 0},
		{"POST /v1/", 0},
		{"", 0},
	} {
		if got := api.CompactVersion([]byte(c.head)); got != c.want {
			t.Errorf("CompactVersion(%q) = %d, want %d", c.head, got, c.want)
		}
	}
	if len(api.CompactPreface) != len(api.CompactPreface2) {
		t.Fatal("the prefaces differ in length: an agent peeks one length")
	}
}

// FuzzCompactFrames: any bytes read as a request or a reply give a value
// or an error wrapping ErrCompact (or io.EOF at a frame's start), never a
// panic; what reads well writes back to the same bytes' value.
func FuzzCompactFrames(f *testing.F) {
	f.Add(api.AppendRequest(nil, &api.CompactRequest{Op: api.OpReleaseNoReply, Lease: "1.2.3", Name: "/a"}))
	f.Add(api.AppendRequest(nil, &api.CompactRequest{Op: api.OpAcquire, Name: "/a", Mode: "read-only", Try: true,
		Timeout: -1, Duration: time.Minute, Limit: 3}))
	f.Add(api.AppendReply(nil, &api.CompactReply{Error: "draining", Message: "m", TTLNanos: time.Second}))
	f.Add([]byte{0x81, 0x80, 0x08})
	f.Add([]byte{3, 9, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReader(bytes.NewReader(b))
		// The same frames read again into one request, through a buffer
		// smaller than most frames (their bodies copied, not peeked).
		small := bufio.NewReaderSize(bytes.NewReader(b), 16)
		var into api.CompactRequest
		for {
			req, err := api.ReadRequest(br)
			ierr := api.ReadRequestInto(small, &into)
			if (err == nil) != (ierr == nil) || err == nil && into != req {
				t.Fatalf("ReadRequest(%x): %+v, %v; through a small buffer into the last request: %+v, %v", b, req, err, into, ierr)
			}
			if err != nil {
				if !errors.Is(err, api.ErrCompact) && !errors.Is(err, io.EOF) {
					t.Fatalf("ReadRequest(%x): %v is neither ErrCompact nor EOF", b, err)
				}
				break
			}
			if req.Op < api.OpAcquire || req.Op > api.OpReleaseNoReply {
				t.Fatalf("ReadRequest(%x) let operation %d through", b, req.Op)
			}
			again, err := api.ReadRequest(bufio.NewReader(bytes.NewReader(api.AppendRequest(nil, &req))))
			if err != nil || again != req {
				t.Fatalf("%+v written and read again: %+v, %v", req, again, err)
			}
		}
		br = bufio.NewReader(bytes.NewReader(b))
		for {
			rep, err := api.ReadReply(br)
			if err != nil {
				if !errors.Is(err, api.ErrCompact) && !errors.Is(err, io.EOF) {
					t.Fatalf("ReadReply(%x): %v is neither ErrCompact nor EOF", b, err)
				}
				break
			}
			again, err := api.ReadReply(bufio.NewReader(bytes.NewReader(api.AppendReply(nil, &rep))))
			if err != nil || again != rep {
				t.Fatalf("%+v written and read again: %+v, %v", rep, again, err)
			}
		}
	})
}

func TestCompactRejects(t *testing.T) {
	good := api.AppendRequest(nil, &api.CompactRequest{Op: api.OpRelease, Lease: "1.2.3"})
	for name, frame := range map[string][]byte{
		"too large":     {0x81, 0x80, 0x08}, // 131,073 bytes
		"cut short":     good[:len(good)-1],
		"no operation":  {1, 0},
		"operation 9":   append([]byte{byte(len(good) - 1), 9}, good[2:]...),
		"trailing byte": append(append([]byte{byte(len(good))}, good[1:]...), 0),
		"bad length":    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		if _, err := api.ReadRequest(bufio.NewReader(bytes.NewReader(frame))); !errors.Is(err, api.ErrCompact) {
			t.Errorf("%s: %v, want ErrCompact", name, err)
		}
	}
}
