package sim

import (
	"fmt"
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

func (h *history) call(client int, name string, k opKind, token uint64) int {
	h.clock++
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: opInput{client, name, k, token},
		Call: h.clock, Return: -1})
	return len(h.ops) - 1
}

func (h *history) ret(i int, ok bool, token uint64) {
	h.clock++
	h.ops[i].Output = opOutput{ok, token}
	h.ops[i].Return = h.clock
}

func (h *history) instant(client int, name string, k opKind, token uint64) {
	h.ret(h.call(client, name, k, token), true, token)
}

// lockState is one name's sequential state: who holds it and the last token.
type lockState struct {
	holder int // -1: nobody
	last   uint64
}

// lockModel is an exclusive lock with fencing tokens: a grant needs a free
// lock and a token above every earlier grant; a failed acquire changes
// nothing; an end frees the lock of its holder.
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
	Init: func() any { return lockState{holder: -1} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(lockState), input.(opInput), output.(opOutput)
		switch in.kind {
		case opAcquire:
			if !out.ok {
				return true, st
			}
			if st.holder != -1 || out.token <= st.last {
				return false, st
			}
			return true, lockState{holder: in.client, last: out.token}
		case opEnd:
			if st.holder != in.client || st.last != in.token {
				return false, st
			}
			return true, lockState{holder: -1, last: st.last}
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
	res := porcupine.CheckOperationsTimeout(lockModel, s.hist.ops, 20*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		s.failf("porcupine: the client-observed history is not linearizable as a fenced lock")
	default:
		s.failf("porcupine: check did not finish (%s)", res)
	}
}
