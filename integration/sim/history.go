package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type opKind uint8

const (
	opAcquire opKind = iota + 1
	opEnd            // the client stopped holding: release, expiry, loss, crash
)

type opInput struct {
	client int
	name   string
	kind   opKind
	token  uint64 // of opEnd
	write  bool   // an exclusive or writer mode; readers share
}

type opOutput struct {
	ok    bool
	token uint64
}

// history is what clients observed. Times are a counter of observations, so
// the order of calls and returns is exactly the order they happened in.
type history struct {
	ops   []porcupine.Operation
	clock int64
}

func (h *history) call(client int, name string, k opKind, token uint64, write bool) int {
	h.clock++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: opInput{client, name, k, token, write},
		Call: h.clock, Return: -1})
	return len(h.ops) - 1
}

func (h *history) ret(i int, ok bool, token uint64) {
	h.clock++
	h.ops[i].Output = opOutput{ok, token}
	h.ops[i].Return = h.clock
}

// mark is a point in the history between observations: the call of an
// operator's force-unlock, from which a hold it took may have ended.
func (h *history) mark() int64 {
	h.clock++
	return h.clock
}

// endSince records c's hold ending somewhere between since and now: a
// grant that raced an operator's force-unlock reaches its client after
// the operator took it, so its end may linearize from the unlock on.
func (h *history) endSince(since int64, client int, name string, token uint64, write bool) {
	h.clock++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: opInput{client, name, opEnd, token, write},
		Call: since, Return: h.clock, Output: opOutput{true, token}})
}

func (h *history) instant(client int, name string, k opKind, token uint64, write bool) {
	h.ret(h.call(client, name, k, token, write), true, token)
}

// lockState is one name's sequential state: its writer, its readers (a
// sorted list, as a string so states compare with ==), the last token
// granted and the last writer's token.
type lockState struct {
	writer    int // -1: none
	readers   string
	last      uint64
	lastWrite uint64
}

func readerList(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		v, _ := strconv.Atoi(f)
		out = append(out, v)
	}
	return out
}

func readerString(ids []int) string {
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, v := range ids {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " ")
}

// lockModel is a reader/writer lock with fencing tokens: a writer needs no
// holder, a reader needs no writer, and every token is above every earlier
// writer's (the per-step check holds hard writers to more); a failed
// acquire changes nothing; an end frees the holder's place.
//
// It models each name alone, nested names too: a name's fencing tokens
// and holders are its own. Holders of names that nest are held to the
// modes' table by the check after every step (checkNested), on the
// clients' own clocks, which sees more than the order of what they
// observed would.
var lockModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string]int{}
		var out [][]porcupine.Operation
		for _, op := range ops {
			name := op.Input.(opInput).name
			i, ok := byName[name]
			if !ok {
				i = len(out)
				byName[name] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], op)
		}
		return out
	},
	Init: func() any { return lockState{writer: -1} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(lockState), input.(opInput), output.(opOutput)
		switch {
		case in.kind == opAcquire && !out.ok:
			return true, st
		case in.kind == opAcquire && in.write:
			if st.writer != -1 || st.readers != "" || out.token <= st.lastWrite {
				return false, st
			}
			st.writer, st.last, st.lastWrite = in.client, out.token, out.token
			return true, st
		case in.kind == opAcquire:
			if st.writer != -1 || out.token <= st.lastWrite {
				return false, st
			}
			st.readers = readerString(append(readerList(st.readers), in.client))
			st.last = max(st.last, out.token)
			return true, st
		case in.kind == opEnd && in.write:
			if st.writer != in.client || st.lastWrite != in.token {
				return false, st
			}
			st.writer = -1
			return true, st
		case in.kind == opEnd:
			rs := readerList(st.readers)
			i := slices.Index(rs, in.client)
			if i < 0 {
				return false, st
			}
			st.readers = readerString(slices.Delete(rs, i, i+1))
			return true, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(opInput), output.(opOutput)
		if in.kind == opEnd {
			return fmt.Sprintf("client %d ends %s token %d", in.client, in.name, in.token)
		}
		return fmt.Sprintf("client %d acquire %s -> ok=%v token %d", in.client, in.name, out.ok, out.token)
	},
}

// checkHistory closes operations still open at the end (they never
// answered, so they may or may not have taken effect) and checks the history.
func (s *Sim) checkHistory() {
	for _, c := range s.clients {
		if c.state == holding {
			s.closeHold(c)
		}
		s.finishOp(c, false, 0)
	}
	// A failed acquire changes nothing and fits any state: it linearizes
	// anywhere in its interval, so leaving it out changes no verdict and
	// spares porcupine the search over where to put it.
	ops := slices.DeleteFunc(slices.Clone(s.hist.ops), func(op porcupine.Operation) bool {
		return op.Input.(opInput).kind == opAcquire && !op.Output.(opOutput).ok
	})
	res := porcupine.CheckOperationsTimeout(lockModel, ops, 20*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		s.failf("porcupine: the client-observed history is not linearizable as a fenced lock")
	default:
		s.failf("porcupine: check did not finish (%s)", res)
	}
}
