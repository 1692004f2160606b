package p2p

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/sluicehq/sluice/core/wire"
)

// QueryProtocol carries operators' questions to one peer and its answer
// (the lock table of a name prefix, say): one stream per question, a
// request frame and an answer frame, each a uvarint length and the bytes.
// It is not lock traffic: it never goes through the node's loop's inbox.
const QueryProtocol protocol.ID = "/sluice/query/1"

const (
	// MaxQuery caps a question's bytes, MaxAnswer an answer's.
	MaxQuery  = 4 << 10
	MaxAnswer = 32 << 20
	// queryWait bounds a question's whole exchange on the answering side.
	queryWait = 10 * time.Second
)

// ErrQuery: a question could not be asked or answered (no such peer, a
// refused stream, a malformed or oversized frame, an answer's error).
var ErrQuery = errors.New("p2p: query failed")

// Answerer answers a question from node from; ctx ends with the stream's
// time limit. An error is sent back as the answer's error text.
type Answerer func(ctx context.Context, from wire.NodeID, question []byte) ([]byte, error)

// HandleQueries answers QueryProtocol streams with a; nil stops answering.
func (h *Host) HandleQueries(a Answerer) {
	if a == nil {
		h.host.RemoveStreamHandler(QueryProtocol)
		return
	}
	h.host.SetStreamHandler(QueryProtocol, func(s network.Stream) {
		if !h.enter() {
			_ = s.Reset()
			return
		}
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, queryWait)
		defer cancel()
		_ = s.SetDeadline(time.Now().Add(queryWait))
		q, err := readQueryFrame(bufio.NewReader(s), MaxQuery)
		if err != nil {
			h.stats.malformed.Add(1)
			_ = s.Reset()
			return
		}
		ans, err := a(ctx, NodeIDOf(s.Conn().RemotePeer()), q)
		// One status byte: 0 and the answer, or 1 and the error's text.
		out := []byte{0}
		if err != nil {
			out, ans = []byte{1}, []byte(err.Error())
		}
		out = binary.AppendUvarint(out, uint64(len(ans)))
		out = append(out, ans...)
		if _, err := s.Write(out); err != nil {
			_ = s.Reset()
			return
		}
		_ = s.Close()
	})
}

// Query asks node to answer question, over a stream of its own.
func (h *Host) Query(ctx context.Context, node wire.NodeID, question []byte) ([]byte, error) {
	if len(question) > MaxQuery {
		return nil, fmt.Errorf("%w: question of %d bytes is over %d", ErrQuery, len(question), MaxQuery)
	}
	h.mu.Lock()
	m := h.members[node]
	var addrs []ma.Multiaddr
	if m != nil {
		// Its connection, maybe dialed for this query alone, is not
		// trimmed while the query runs.
		m.querying++
		addrs = m.addrs
	}
	h.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("%w: node %d is not a known peer", ErrQuery, node)
	}
	defer func() {
		h.mu.Lock()
		m.querying--
		m.used = time.Now()
		h.mu.Unlock()
	}()
	if h.host.Network().Connectedness(m.id) != network.Connected {
		h.rememberAddrs(m.id, addrs)
	}
	s, err := h.host.NewStream(ctx, m.id, QueryProtocol)
	if err != nil {
		return nil, fmt.Errorf("%w: node %d: %w", ErrQuery, node, err)
	}
	defer s.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	frame := binary.AppendUvarint(nil, uint64(len(question)))
	if _, err := s.Write(append(frame, question...)); err != nil {
		return nil, fmt.Errorf("%w: node %d: %w", ErrQuery, node, err)
	}
	_ = s.CloseWrite()
	br := bufio.NewReader(s)
	status, err := br.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("%w: node %d: %w", ErrQuery, node, err)
	}
	ans, err := readQueryFrame(br, MaxAnswer)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: node %d: %w", ErrQuery, node, err)
	case status == 1:
		return nil, fmt.Errorf("%w: node %d answered: %s", ErrQuery, node, ans)
	case status != 0:
		return nil, fmt.Errorf("%w: node %d: status %d", ErrQuery, node, status)
	}
	return ans, nil
}

func readQueryFrame(br *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("frame of %d bytes is over %d", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, err
	}
	return b, nil
}
