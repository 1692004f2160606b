package api

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The compact protocol carries the per-request calls (acquire, release,
// renew) on the API's Unix socket without HTTP and JSON, which cost more
// than a lock granted on the agent's shared read ticket. A connection
// opens with a preface that names its version (no HTTP request starts
// with a zero byte), then carries calls, each a frame: a uvarint length,
// then the body. Numbers are uvarints, durations varints of nanoseconds,
// strings a uvarint length and the bytes. Everything else, and every
// client that is not Go, uses HTTP/JSON.
//
// Version 1 (CompactPreface) carries one request and its answer at a
// time. Version 2 (CompactPreface2) adds OpReleaseNoReply: a release the
// agent does not answer, so that a page view costs one round trip (the
// try) and one write (its release), and the next call may follow the
// release at once on the same connection. The agent runs a connection's
// calls in order: the release is done before the next call on it starts.
// It counts and logs such a release's failure, which no client hears of;
// the lease's expiry bounds a lost one. Every other call is answered as
// in version 1. An agent that speaks version 1 only hands the version 2
// preface to its HTTP server, which answers it as a malformed request, as
// an agent from before the compact protocol answers either preface: the
// agent never ran the call, and the client sends it again on a version 1
// connection (refused again, over HTTP).

// CompactPreface opens a connection of the compact protocol's version 1.
// It ends a request head, as HTTP would, so that an agent from before the
// compact protocol answers it at once with an HTTP error (the client then
// uses HTTP) instead of waiting for more.
var CompactPreface = []byte("\x00SLC1\r\n\r\n")

// CompactPreface2 opens a connection of the compact protocol's version 2,
// as long as CompactPreface, so that an agent reads either whole before it
// routes the connection.
var CompactPreface2 = []byte("\x00SLC2\r\n\r\n")

// CompactVersion is the protocol version preface opens (1 or 2), or 0 for
// bytes that open no compact connection (HTTP, or garbage).
func CompactVersion(preface []byte) int {
	switch {
	case bytes.Equal(preface, CompactPreface):
		return 1
	case bytes.Equal(preface, CompactPreface2):
		return 2
	}
	return 0
}

// MaxCompactFrame caps a frame's body, as maxBody caps an HTTP body.
const MaxCompactFrame = 64 << 10

// Compact operations.
const (
	OpAcquire byte = iota + 1
	OpRelease
	OpRenew
	// OpReleaseNoReply is a release the agent does not answer (version
	// 2 only): its frame is OpRelease's.
	OpReleaseNoReply
)

// ErrCompact: a compact frame is malformed or too large.
var ErrCompact = errors.New("api: malformed compact frame")

// CompactRequest is one call. Acquire uses the lock's fields; release and
// renew Lease and the lock's Name (renew its Mode, Duration and Grace
// too). An acquire is read as its HTTP body would be: a Duration, Grace
// or Quiet of 0 is the default, and a Timeout of 0 is an answer at once
// (HTTP's "timeout": "0s"): send DefaultTimeout to wait.
type CompactRequest struct {
	Op                              byte
	Name                            string
	Mode                            string
	Try                             bool
	Timeout, Duration, Grace, Quiet time.Duration
	Limit                           int
	Lease                           string
}

// CompactReply answers a call: Error (an API error code) and Message, or
// the lease (acquire and renew; release has none).
type CompactReply struct {
	Error, Message string
	LeaseJSON
	TTLNanos time.Duration
}

// AppendRequest appends r's frame to dst.
func AppendRequest(dst []byte, r *CompactRequest) []byte {
	// The body is built in a buffer on the stack, then framed: a page
	// view's call allocates nothing here.
	var scratch [160]byte
	b := append(scratch[:0], r.Op)
	b = appendString(b, r.Name)
	b = appendString(b, r.Mode)
	try := byte(0)
	if r.Try {
		try = 1
	}
	b = append(b, try)
	for _, d := range [...]time.Duration{r.Timeout, r.Duration, r.Grace, r.Quiet} {
		b = binary.AppendVarint(b, int64(d)) // a negative one is the agent's to refuse
	}
	b = binary.AppendUvarint(b, uint64(max(r.Limit, 0)))
	b = appendString(b, r.Lease)
	return appendFrame(dst, b)
}

// ReadRequest reads one request frame: any operation of version 2 (the
// agent refuses OpReleaseNoReply on a version 1 connection).
func ReadRequest(br *bufio.Reader) (CompactRequest, error) {
	var r CompactRequest
	if err := ReadRequestInto(br, &r); err != nil {
		return CompactRequest{}, err
	}
	return r, nil
}

// ReadRequestInto is ReadRequest into r, whose Name and Mode strings it
// keeps when the frame carries the same: a connection's calls are mostly
// about one name, and reading them so allocates only the lease's id. On
// an error r is zero.
func ReadRequestInto(br *bufio.Reader, r *CompactRequest) error {
	body, n, err := readFrame(br)
	if err != nil {
		*r = CompactRequest{}
		return err
	}
	d := compactDecoder{b: body}
	r.Op = d.byte()
	r.Name = d.stringLike(r.Name)
	r.Mode = d.mode(r.Mode)
	r.Try = d.byte() == 1
	r.Timeout, r.Duration, r.Grace, r.Quiet = d.duration(), d.duration(), d.duration(), d.duration()
	r.Limit = int(min(d.uvarint(), 1<<31))
	r.Lease = d.string()
	err = d.end()
	if _, derr := br.Discard(n); err == nil {
		err = derr
	}
	if err != nil {
		*r = CompactRequest{}
		return err
	}
	if r.Op < OpAcquire || r.Op > OpReleaseNoReply {
		*r = CompactRequest{}
		return fmt.Errorf("%w: operation %d", ErrCompact, r.Op)
	}
	return nil
}

// AppendReply appends r's frame to dst.
func AppendReply(dst []byte, r *CompactReply) []byte {
	var scratch [160]byte
	b := scratch[:0]
	for _, s := range [...]string{r.Error, r.Message, r.Lease, r.Name, r.Mode} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, r.Token)
	b = binary.AppendVarint(b, int64(r.TTLNanos))
	return appendFrame(dst, b)
}

// ReadReply reads one reply frame.
func ReadReply(br *bufio.Reader) (CompactReply, error) { return ReadReplyTo(br, "") }

// ReadReplyTo is ReadReply for a call about name: a reply about the
// same name keeps name's string, without a copy.
func ReadReplyTo(br *bufio.Reader, name string) (CompactReply, error) {
	var r CompactReply
	body, n, err := readFrame(br)
	if err != nil {
		return r, err
	}
	d := compactDecoder{b: body}
	r.Error, r.Message, r.Lease, r.Name = d.string(), d.string(), d.string(), d.stringLike(name)
	r.Mode = d.mode("")
	r.Token = d.uvarint()
	r.TTLNanos = d.duration()
	err = d.end()
	if _, derr := br.Discard(n); err == nil {
		err = derr
	}
	if err != nil {
		return CompactReply{}, err
	}
	return r, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendFrame(dst, body []byte) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(body))), body...)
}

// readFrame reads a frame's length and returns its body; io.EOF before
// its first byte is a connection closed between calls. A body that fits
// br's buffer is br's own bytes, valid until the caller discards n of
// them, once it decoded them (a call's frame is read without a copy);
// a longer one is read into a slice of its own (n is 0).
func readFrame(br *bufio.Reader) (body []byte, n int, err error) {
	size, err := binary.ReadUvarint(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("%w: length: %w", ErrCompact, err)
	}
	if size > MaxCompactFrame {
		return nil, 0, fmt.Errorf("%w: %d bytes, the most is %d", ErrCompact, size, MaxCompactFrame)
	}
	if int(size) <= br.Size() {
		b, err := br.Peek(int(size))
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, 0, fmt.Errorf("%w: body: %w", ErrCompact, err)
		}
		return b, int(size), nil
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, 0, fmt.Errorf("%w: body: %w", ErrCompact, err)
	}
	return b, 0, nil
}

// compactDecoder reads a body's fields; the first failure sticks.
type compactDecoder struct {
	b   []byte
	err error
}

func (d *compactDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCompact, what)
	}
	d.b = nil
}

func (d *compactDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("short")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *compactDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *compactDecoder) duration() time.Duration {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad duration")
		return 0
	}
	d.b = d.b[n:]
	return time.Duration(v)
}

func (d *compactDecoder) string() string { return string(d.field()) }

// field is a string field's bytes, in the body.
func (d *compactDecoder) field() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string past the end")
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

// stringLike is string, returning was itself when the bytes are the
// same (no copy).
func (d *compactDecoder) stringLike(was string) string {
	b := d.field()
	if string(b) == was {
		return was
	}
	return string(b)
}

// knownModes are the modes' names as clients send them, kept as
// constants so that reading one costs no copy.
var knownModes = [...]string{"read-only", "read-write-priority", "read-write", "read-write-gentle", "exclusive",
	"hard", "soft", "gentle", "intent-shared", "intent-exclusive"}

// mode is string for a mode's name: was, or one of knownModes, without
// a copy when it is.
func (d *compactDecoder) mode(was string) string {
	b := d.field()
	if string(b) == was {
		return was
	}
	for _, m := range knownModes {
		if string(b) == m {
			return m
		}
	}
	return string(b)
}

// end checks that the body was read whole and well.
func (d *compactDecoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	return d.err
}
