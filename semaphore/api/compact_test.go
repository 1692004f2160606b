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
