package p2p

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/sluicehq/sluice/core/wire"
)

// Send queues m for m.To and never blocks. It returns false, counting a
// drop, when m.To is this node or unknown, its queue is full, m cannot be
// encoded or the host is closed.
func (h *Host) Send(m wire.Message) bool {
	if m.To == h.self {
		h.stats.dropped.Add(1)
		return false
	}
	p := h.openPeer(m.To)
	if p == nil {
		h.stats.dropped.Add(1)
		return false
	}
	// Encoding here, not in the writer, snapshots m: the caller may reuse
	// its slices as soon as Send returns.
	codec := h.sendCodec(p)
	f, err := encodeFrame(&m, codec)
	if err != nil {
		h.stats.dropped.Add(1)
		h.log.Warn("p2p: unencodable message dropped", "to", m.To, "kind", m.Kind, "err", err)
		return false
	}
	select {
	case p.queue <- frames{b: f, n: 1, codec: codec, lossy: wire.Lossy(&m, codec)}:
		h.ensureWriter(p)
		return true
	default:
		h.stats.dropped.Add(1)
		return false
	}
}

// SendAll queues msgs as Send does, but the messages to one peer go as one
// queue entry, written together: the requests of a loop turn share one
// write, one encryption and one wake-up of the writer per peer. Frames
// stay one per message, so the receiving end is the same. It returns how
// many messages it dropped.
func (h *Host) SendAll(msgs []wire.Message) int {
	dropped := 0
	type batch struct {
		to   wire.NodeID
		peer *member // nil: unknown, or the host is closed
		frames
	}
	var batches []batch // few peers: a slice beats a map
	var body []byte
	for i := range msgs {
		m := &msgs[i]
		if m.To == h.self {
			dropped++
			continue
		}
		k := slices.IndexFunc(batches, func(b batch) bool { return b.to == m.To })
		if k < 0 {
			k = len(batches)
			batches = append(batches, batch{to: m.To, peer: h.openPeer(m.To)})
		}
		b := &batches[k]
		if b.peer == nil {
			dropped++
			continue
		}
		var err error
		if b.n == 0 {
			b.codec = h.sendCodec(b.peer)
		}
		if body, err = wire.EncodeVersion(body[:0], m, b.codec); err != nil {
			h.log.Warn("p2p: unencodable message dropped", "to", m.To, "kind", m.Kind, "err", err)
			dropped++
			continue
		}
		b.lossy = b.lossy || wire.Lossy(m, b.codec)
		b.b = binary.AppendUvarint(b.b, uint64(len(body)))
		b.b = append(b.b, body...)
		b.n++
	}
	for _, b := range batches {
		if b.peer == nil || b.n == 0 {
			continue
		}
		select {
		case b.peer.queue <- b.frames:
			h.ensureWriter(b.peer)
		default:
			dropped += int(b.n)
		}
	}
	h.stats.dropped.Add(uint64(dropped))
	return dropped
}

// writeCodec is the codec of m's stream: its frames must be in it (see
// frames.stale); the oldest this build writes before a stream opened.
func (m *member) writeCodec() byte { return max(byte(m.codec.Load()), wire.MinVersion) }

// sendCodec is the codec a frame for m is written in when queued: its
// stream's; before the first stream opened, the one it will most likely
// open in, the newest lock protocol the peerstore says the peer speaks
// (identify), which is how NewStream picks. A wrong guess costs the frames
// written in it, dropped as stale at the open, never a frame the peer
// cannot read.
func (h *Host) sendCodec(m *member) byte {
	if c := byte(m.codec.Load()); c != 0 {
		return c
	}
	if p, err := h.host.Peerstore().FirstSupportedProtocol(m.id, lockProtocolIDs(h.codec)...); err == nil && p != "" {
		return codecOf(p)
	}
	return wire.MinVersion
}

// frames are encoded frames queued for a peer's stream: n of them in b,
// in codec; lossy when codec left out a field a message sets, so that a
// stream of a newer codec must not carry them (see stale).
type frames struct {
	b     []byte
	n     uint64
	codec byte
	lossy bool
}

// stale reports whether f must not go on a stream of codec: written for
// an older codec that lost a field (queued before the stream to a peer
// that was upgraded opened: a view would arrive without its level), or for
// a newer one the peer does not read.
func (f frames) stale(codec byte) bool {
	return f.codec > codec || f.lossy && f.codec < codec
}

// openPeer is the member to with its queue made, or nil when it is
// unknown or the host is closed. A frame queued to it must be followed by
// ensureWriter.
func (h *Host) openPeer(to wire.NodeID) *member {
	h.mu.RLock()
	m := h.members[to]
	ok := m != nil && m.queue != nil && !h.closed
	h.mu.RUnlock()
	if ok {
		return m
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if m = h.members[to]; m == nil || h.closed {
		return nil
	}
	if m.queue == nil {
		m.queue = make(chan frames, h.queueLen)
	}
	return m
}

// ensureWriter starts m's writer unless it runs. Called after a frame was
// queued: a writer ends only on an empty queue, checked under h.mu, so
// either it saw the frame or this sees it gone.
func (h *Host) ensureWriter(m *member) {
	h.mu.RLock()
	running := m.writing || h.closed
	h.mu.RUnlock()
	if running {
		return
	}
	// protecting orders this start's Protect after the Unprotect of a
	// writer that just ended: the other way round, the new writer's
	// connection would be the connection manager's to trim.
	m.protecting.Lock()
	defer m.protecting.Unlock()
	h.mu.Lock()
	start := !m.writing && !h.closed
	if start {
		m.writing = true
		h.wg.Add(1) // under h.mu with closed unset: Close has not started waiting
	}
	h.mu.Unlock()
	if start {
		// A connection written to is not the connection manager's to trim.
		h.host.ConnManager().Protect(m.id, writingTag)
		go h.writeLoop(m)
	}
}

// writerDone ends m's writer if its queue is empty, and reports whether
// it did.
func (h *Host) writerDone(m *member) bool {
	m.protecting.Lock()
	defer m.protecting.Unlock()
	h.mu.Lock()
	done := len(m.queue) == 0
	if done {
		m.writing, m.used = false, time.Now()
	}
	h.mu.Unlock()
	if done {
		h.host.ConnManager().Unprotect(m.id, writingTag)
	}
	return done
}

// SendWait is Send that waits for room in the peer's queue instead of
// dropping: for bulk transfers made off the node's loop (a handoff's
// snapshot), where a full queue means "slow down", not "lose it". ctx
// bounds the wait.
func (h *Host) SendWait(ctx context.Context, m wire.Message) error {
	if m.To == h.self {
		return fmt.Errorf("%w: send to itself", ErrConfig)
	}
	p := h.openPeer(m.To)
	if p == nil {
		h.stats.dropped.Add(1)
		return fmt.Errorf("%w: node %d is unknown, or the host is closed", ErrUnknownPeer, m.To)
	}
	codec := h.sendCodec(p)
	f, err := encodeFrame(&m, codec)
	if err != nil {
		h.stats.dropped.Add(1)
		return err
	}
	select {
	case p.queue <- frames{b: f, n: 1, codec: codec, lossy: wire.Lossy(&m, codec)}:
		h.ensureWriter(p)
		return nil
	case <-ctx.Done():
		h.stats.dropped.Add(1)
		return ctx.Err()
	case <-h.ctx.Done():
		h.stats.dropped.Add(1)
		return fmt.Errorf("%w: host closed", ErrUnknownPeer)
	}
}

// encodeFrame returns the uvarint length and the encoded message in one
// allocation: the body is encoded after room for the longest prefix, which
// is then written right before it.
func encodeFrame(m *wire.Message, codec byte) ([]byte, error) {
	const room = binary.MaxVarintLen32
	b, err := wire.EncodeVersion(make([]byte, room, room+128), m, codec)
	if err != nil {
		return nil, err
	}
	var pre [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(pre[:], uint64(len(b)-room))
	start := room - n
	copy(b[start:], pre[:n])
	return b[start:], nil
}

// writeLoop owns the one outbound lock stream to m: it opens it on the first
// frame, writes every queued frame with one flush per batch, and on a
// failure resets it and opens a new one, after a backoff, on the next frame.
// After writerIdle without a frame it closes the stream and ends; the
// next frame starts a new writer (ensureWriter).
func (h *Host) writeLoop(m *member) {
	defer h.wg.Done()
	var (
		s  network.Stream
		bw = bufio.NewWriterSize(nil, writerBatch)
		bo backoff
	)
	bo.reset()
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	defer func() {
		if s != nil {
			_ = s.Reset()
		}
	}()
	for {
		var f frames
		select {
		case <-h.ctx.Done():
			return
		case <-idle.C:
			if h.writerDone(m) {
				if s != nil {
					_ = s.Close() // the reader sees a clean end
					s = nil
				}
				return
			}
			idle.Reset(writerIdle)
			continue
		case f = <-m.queue:
		}
		idle.Reset(writerIdle)
		if s == nil {
			st, err := h.openLockStream(m, f.n)
			if errors.Is(err, errDowngraded) {
				s = st
				bw.Reset(s)
				continue
			}
			if err != nil {
				if !h.sleep(bo.next()) {
					return
				}
				continue
			}
			s = st
			bw.Reset(s)
		}
		codec := m.writeCodec()
		if f.stale(codec) {
			h.stats.dropped.Add(f.n)
			continue
		}
		_ = s.SetWriteDeadline(time.Now().Add(writeTimeout))
		n, stale, err := writeBatch(bw, f, m.queue, codec)
		h.stats.dropped.Add(stale)
		if err == nil {
			h.stats.framesOut.Add(n)
			h.stats.writes.Add(1)
			bo.reset()
			continue
		}
		_ = s.Reset()
		s = nil
		h.stats.resets.Add(1)
		h.stats.dropped.Add(n)
		if h.ctx.Err() == nil {
			h.log.Debug("p2p: lock stream write failed", "peer", m.id, "err", err)
		}
		if !h.sleep(bo.next()) {
			return
		}
	}
}

// openLockStream opens the outbound lock stream to m. When that fails it
// drops the frame in hand and the queue behind it: the peer is unreachable,
// what is queued is stale by the time it comes back, and the core
// retransmits what matters.
func (h *Host) openLockStream(m *member, inHand uint64) (network.Stream, error) {
	h.stats.dials.Add(1)
	if h.host.Network().Connectedness(m.id) != network.Connected {
		// A peer that is not kept is dialed here, on demand: its
		// addresses may have aged out of the peerstore since it announced.
		h.mu.RLock()
		addrs := m.addrs
		h.mu.RUnlock()
		h.rememberAddrs(m.id, addrs)
	}
	ctx, cancel := context.WithTimeout(h.ctx, streamTimeout)
	st, err := h.host.NewStream(ctx, m.id, lockProtocolIDs(h.codec)...)
	cancel()
	if err != nil {
		h.stats.dialFailures.Add(1)
		h.stats.dropped.Add(inHand + drain(m.queue))
		if h.ctx.Err() == nil {
			h.log.Debug("p2p: open lock stream failed", "peer", m.id, "err", err)
		}
		return nil, err
	}
	// We never read this stream; tell the peer so.
	_ = st.CloseRead()
	codec := codecOf(st.Protocol())
	if old := byte(m.codec.Swap(uint32(codec))); old > codec {
		// The peer now reads an older codec (it was downgraded): what is
		// queued was written for the newer one. Drop it; the core
		// retransmits what matters.
		h.stats.dropped.Add(inHand + drain(m.queue))
		h.log.Info("p2p: peer speaks an older codec now", "peer", m.id, "codec", codec, "was", old)
		return st, errDowngraded
	}
	return st, nil
}

// writeBatch writes f and the frames queued behind it, until writerBatch
// bytes are buffered, with one flush; it returns how many frames it wrote
// and how many it dropped as stale for the stream's codec.
func writeBatch(bw *bufio.Writer, f frames, queue chan frames, codec byte) (n, stale uint64, err error) {
	n = f.n
	_, err = bw.Write(f.b)
batch:
	for err == nil && bw.Buffered() < writerBatch {
		select {
		case f = <-queue:
			if f.stale(codec) {
				stale += f.n
				continue
			}
			n += f.n
			_, err = bw.Write(f.b)
		default:
			break batch
		}
	}
	if err == nil {
		err = bw.Flush()
	}
	return n, stale, err
}

// drain empties q without blocking and returns how many frames it dropped.
func drain(q chan frames) uint64 {
	var n uint64
	for {
		select {
		case f := <-q:
			n += f.n
		default:
			return n
		}
	}
}

// sleep waits d or until Close; false means the host is closing.
func (h *Host) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

var (
	// errDowngraded: the stream is open, in an older codec than the frame
	// in hand was written in, which was dropped.
	errDowngraded = errors.New("p2p: the peer reads an older codec now")
	errOversized  = errors.New("p2p: frame over size cap")
	errBadLength  = errors.New("p2p: malformed frame length")
)

// handleStream reads the frames of one inbound lock stream until it ends.
// A bad frame resets the stream: the peer's writer opens a new one.
func (h *Host) handleStream(s network.Stream) {
	if !h.enter() {
		_ = s.Reset()
		return
	}
	defer h.wg.Done()
	remote := s.Conn().RemotePeer()
	from := NodeIDOf(remote)
	if h.addMember(remote, "", nil, true) {
		h.poke()
	}
	br := bufio.NewReaderSize(s, writerBatch)
	var buf []byte
	msg := new(wire.Message) // decoded into frame after frame, and copied out
	for {
		var ok bool
		buf, ok = h.readFrame(s, br, buf, msg)
		if !ok {
			return
		}
		msg.From = from // the authenticated sender, whatever the frame says
		h.stats.framesIn.Add(1)
		select {
		case h.inbox <- *msg:
		case <-h.ctx.Done():
			_ = s.Reset()
			return
		}
	}
}

// readFrame reads the next frame of s that this build understands, in
// buf (grown when it is too small; the grown one is returned for the
// next frame), and decodes it into msg. A frame of another release that it does
// not understand is refused alone. When the stream ends or a frame is bad it
// closes or resets s and returns false.
func (h *Host) readFrame(s network.Stream, br *bufio.Reader, buf []byte, msg *wire.Message) ([]byte, bool) {
	for {
		grown, ok, refused := h.readOne(s, br, buf, msg)
		if buf = grown; !refused {
			return buf, ok
		}
	}
}

// readOne is readFrame for one frame; refused says it was another
// release's frame this build does not understand.
func (h *Host) readOne(s network.Stream, br *bufio.Reader, buf []byte, msg *wire.Message) (_ []byte, ok, refused bool) {
	n, err := h.readLen(br)
	if err != nil {
		h.endOnLength(s, err)
		return buf, false, false
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	// A peer that announced a body must deliver it; the deadline costs a
	// timer, so only pay it when the body is not buffered already.
	timed := br.Buffered() < n
	if timed {
		_ = s.SetReadDeadline(time.Now().Add(bodyTimeout))
	}
	if _, err := io.ReadFull(br, buf); err != nil {
		_ = s.Reset()
		return buf, false, false
	}
	if timed {
		_ = s.SetReadDeadline(time.Time{})
	}
	err = wire.DecodeInto(buf, msg)
	if n > 0 && buf[0] > h.codec {
		err = fmt.Errorf("%w: %d, over this host's %d", wire.ErrVersion, buf[0], h.codec)
	}
	switch {
	case errors.Is(err, wire.ErrVersion) || errors.Is(err, wire.ErrKind) || errors.Is(err, wire.ErrMustUnderstand):
		// Another release's frame, whole: refuse it alone and read on. The
		// log says so at the 1st, 2nd, 4th, 8th... refusal: a peer that
		// keeps sending them does not flood it.
		if n := h.stats.refused.Add(1); n&(n-1) == 0 {
			h.refused(s.Conn().RemotePeer(), err, n)
		}
		return buf, true, true
	case err != nil:
		h.stats.malformed.Add(1)
		h.reset(s, "malformed frame", s.Conn().RemotePeer())
		return buf, false, false
	}
	return buf, true, false
}

// endOnLength ends s after readLen failed with err: a clean end of the
// stream closes it, anything else resets it.
func (h *Host) endOnLength(s network.Stream, err error) {
	remote := s.Conn().RemotePeer()
	switch {
	case errors.Is(err, errOversized):
		h.stats.oversized.Add(1)
		h.reset(s, "oversized frame", remote)
	case errors.Is(err, errBadLength):
		h.stats.malformed.Add(1)
		h.reset(s, "malformed frame length", remote)
	case errors.Is(err, io.EOF):
		_ = s.Close() // the peer closed its side cleanly
	default:
		_ = s.Reset()
	}
}

// refused logs a frame refused for what this build does not know, with
// both ends' versions.
func (h *Host) refused(remote peer.ID, err error, count uint64) {
	h.mu.RLock()
	var version string
	if m := h.members[NodeIDOf(remote)]; m != nil {
		version = m.version
	}
	h.mu.RUnlock()
	h.log.Warn("p2p: frame refused: written by a sluice release this one does not read", "peer", remote, "peer_version", cmp.Or(version, "not announced"),
		"version", cmp.Or(h.version, "not set"), "codecs", fmt.Sprintf("%d to %d", wire.MinVersion, wire.Version), "refused", count, "err", err)
}

func (h *Host) reset(s network.Stream, why string, remote any) {
	h.stats.resets.Add(1) // before the reset, which the peer observes
	_ = s.Reset()
	h.log.Warn("p2p: lock stream reset", "why", why, "peer", remote)
}

// readLen reads a frame's uvarint length, refusing it as soon as it is over
// the cap, so a hostile length is never allocated.
func (h *Host) readLen(br *bufio.Reader) (int, error) {
	var x uint64
	for shift := uint(0); ; shift += 7 {
		b, err := br.ReadByte()
		if err != nil {
			if shift > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if shift > 35 {
			return 0, errBadLength // a padded varint: no length needs 6 bytes
		}
		x |= uint64(b&0x7f) << shift
		if x > uint64(h.maxFrame) {
			return 0, errOversized
		}
		if b < 0x80 {
			return int(x), nil
		}
	}
}

// backoff is a jittered exponential delay between backoffMin and backoffMax.
type backoff struct{ cur time.Duration }

func (b *backoff) reset() { b.cur = backoffMin }

// next returns the delay to wait now and doubles the next one.
func (b *backoff) next() time.Duration {
	if b.cur < backoffMin {
		b.cur = backoffMin
	}
	d := b.cur/2 + rand.N(b.cur/2+1) // [cur/2, cur]
	b.cur = min(2*b.cur, backoffMax)
	return d
}
