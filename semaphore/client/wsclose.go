package client

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// closingConn is a hijacked connection of a websocket upgrade that the
// middleware can end with a websocket close frame (1001, going away)
// when the request's lease is lost, so that the visitor's script hears
// why. It follows what the server writes (the HTTP answer, then frames),
// so that the close frame goes between two frames, never inside one: a
// loss that comes mid-frame, or while a write is under way, closes the
// connection without one. Frames the handler or upstream write after the
// loss are refused, as the leaseWriter's writes are.
type closingConn struct {
	net.Conn
	mu      sync.Mutex
	writing bool // a Write is under way (outside mu)
	ended   bool
	// head gathers the HTTP answer until its blank line; upgraded is set
	// when it was a 101, and frames follow. A head too long to be one
	// stops the following (no close frame, only the close).
	head     []byte
	inHead   bool
	upgraded bool
	lost     bool // the stream could not be followed
	frame    frameScan
}

func newClosingConn(c net.Conn) *closingConn { return &closingConn{Conn: c, inHead: true} }

// maxHead bounds the HTTP answer closingConn reads before the frames.
const maxHead = 16 << 10

// closeFrame is an unmasked close frame, as servers send them: status
// 1001 (going away) and a reason.
var closeFrame = func() []byte {
	reason := "maintenance"
	b := []byte{0x88, byte(2 + len(reason)), 0, 0}
	binary.BigEndian.PutUint16(b[2:], 1001)
	return append(b, reason...)
}()

// closeFrameWait bounds the write of the close frame to a slow visitor.
const closeFrameWait = time.Second

func (c *closingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return 0, ErrLeaseLost
	}
	c.writing = true
	c.mu.Unlock()
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writing = false
	c.follow(p[:n])
	if c.ended { // lost while it wrote: end closed the connection
		return n, ErrLeaseLost
	}
	return n, err
}

// follow reads what went out: the HTTP answer, then frames.
func (c *closingConn) follow(p []byte) {
	if c.lost {
		return
	}
	if c.inHead {
		c.head = append(c.head, p...)
		i := bytes.Index(c.head, []byte("\r\n\r\n"))
		if i < 0 {
			if len(c.head) > maxHead {
				c.lost = true
			}
			return
		}
		c.inHead = false
		c.upgraded = bytes.HasPrefix(c.head, []byte("HTTP/1.1 101 ")) || bytes.HasPrefix(c.head, []byte("HTTP/1.0 101 "))
		p = c.head[i+4:]
		c.head = nil
		if !c.upgraded {
			c.lost = true
			return
		}
	}
	c.frame.scan(p)
}

// end closes the connection after a close frame when one can go now.
func (c *closingConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	if !c.writing && c.upgraded && !c.lost && c.frame.between() {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFrameWait))
		_, _ = c.Conn.Write(closeFrame)
	}
	_ = c.Conn.Close()
}

// frameScan follows websocket frames (RFC 6455 §5.2) through the bytes
// that carry them.
type frameScan struct {
	head []byte // the header read so far
	left uint64 // payload bytes of the current frame still to come
}

func (f *frameScan) scan(p []byte) {
	for len(p) > 0 {
		if f.left > 0 {
			k := uint64(len(p))
			if k > f.left {
				k = f.left
			}
			f.left -= k
			p = p[k:]
			continue
		}
		f.head = append(f.head, p[0])
		p = p[1:]
		if n := headLen(f.head); n > 0 && len(f.head) == n {
			f.left = payloadLen(f.head)
			f.head = f.head[:0]
		}
	}
}

// between: no frame is begun and unfinished.
func (f *frameScan) between() bool { return f.left == 0 && len(f.head) == 0 }

// headLen is the length of the frame header that h begins (0: not known
// from h yet).
func headLen(h []byte) int {
	if len(h) < 2 {
		return 0
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4 // a mask key
	}
	return n
}

// payloadLen is the payload length of the whole header h.
func payloadLen(h []byte) uint64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(l)
	}
}
