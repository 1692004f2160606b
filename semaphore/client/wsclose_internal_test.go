package client

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// frame is a server's websocket frame with n payload bytes (masked when
// mask), as its header sizes it (7-bit, 16-bit or 64-bit length).
func frame(n int, mask bool) []byte {
	b := []byte{0x82}
	m := byte(0)
	if mask {
		m = 0x80
	}
	switch {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask {
		b = append(b, 1, 2, 3, 4)
	}
	return append(b, bytes.Repeat([]byte{'x'}, n)...)
}

// TestFrameScanFollowsFrames: the scan is between frames exactly at
// their ends, however the bytes are cut into writes.
func TestFrameScanFollowsFrames(t *testing.T) {
	var stream []byte
	var ends []int
	for _, f := range [][]byte{frame(0, false), frame(5, false), frame(125, true), frame(126, false), frame(70000, false), frame(3, true)} {
		stream = append(stream, f...)
		ends = append(ends, len(stream))
	}
	for _, step := range []int{1, 2, 3, 7, 64, 1000, len(stream)} {
		var f frameScan
		at := 0
		for at < len(stream) {
			n := min(step, len(stream)-at)
			f.scan(stream[at : at+n])
			at += n
			isEnd := false
			for _, e := range ends {
				isEnd = isEnd || e == at
			}
			if f.between() != isEnd {
				t.Fatalf("writes of %d: at %d between=%v, want %v", step, at, f.between(), isEnd)
			}
		}
	}
}

// TestClosingConnFollowsTheAnswer: frames are followed only after a 101;
// another answer, or a head too long to be one, stops the following.
func TestClosingConnFollowsTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes [][]byte
		want   bool // a close frame may go
	}{
		{"101 then a frame", [][]byte{[]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"), frame(4, false)}, true},
		{"101 and a frame in one write", [][]byte{append([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"), frame(4, false)...)}, true},
		{"101 and half a frame", [][]byte{append([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"), frame(4, false)[:3]...)}, false},
		{"head in pieces", [][]byte{[]byte("HTTP/1.1 101 Switching"), []byte(" Protocols\r\n\r"), []byte("\n")}, true},
		{"a 200", [][]byte{[]byte("HTTP/1.1 200 OK\r\n\r\n")}, false},
		{"no end of head", [][]byte{bytes.Repeat([]byte("x"), maxHead+1)}, false},
	} {
		c := &closingConn{inHead: true}
		for _, w := range tc.writes {
			c.follow(w)
		}
		if got := c.upgraded && !c.lost && c.frame.between() && !c.inHead; got != tc.want {
			t.Errorf("%s: a close frame may go: %v, want %v", tc.name, got, tc.want)
		}
	}
}
