package integration

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/sluicehq/sluice/semaphore"
)

// fenceState is one name's state in the model: its writer, its readers
// (sorted, as a string so that states compare with ==) and the last
// writer's token.
type fenceState struct {
	writer    int // -1: none
	readers   string
	lastWrite uint64
}

type fenceOut struct {
	outcome outcome
	token   uint64
}

// fencedLockModel is a reader/writer lock with fencing tokens, per name: a
// writer needs no holder, a reader needs no writer, and every grant's token
// is above every earlier writer's (not every earlier reader's: a soft
// writer lets readers with later tickets pass, and is granted after them
// with its own, lower one); an end frees the client's place. An
// acquire that was refused or whose outcome is unknown changes nothing the
// clients observe: its client never acted under it (a lease granted
// without its client knowing holds nobody's work).
var fencedLockModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		for _, op := range ops {
			name := op.Input.(histOp).name
			byName[name] = append(byName[name], op)
		}
		var out [][]porcupine.Operation
		for _, name := range slices.Sorted(maps.Keys(byName)) {
			out = append(out, byName[name])
		}
		return out
	},
	Init: func() any { return fenceState{writer: -1} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(fenceState), input.(histOp), output.(fenceOut)
		switch {
		case !in.end && out.outcome != granted:
			return true, st
		case !in.end:
			if st.writer != -1 || in.writes() && st.readers != "" || out.token <= st.lastWrite {
				return false, st
			}
			if in.writes() {
				st.writer, st.lastWrite = in.client, out.token
			} else {
				st.readers = withReader(st.readers, in.client, true)
			}
			return true, st
		case in.writes():
			if st.writer != in.client {
				return false, st
			}
			st.writer = -1
			return true, st
		default:
			if !slices.Contains(strings.Fields(st.readers), strconv.Itoa(in.client)) {
				return false, st
			}
			st.readers = withReader(st.readers, in.client, false)
			return true, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(histOp), output.(fenceOut)
		if in.end {
			return fmt.Sprintf("client %d (%s) ends %s %s token %d", in.client, in.via, in.mode, in.name, in.token)
		}
		return fmt.Sprintf("client %d (%s) acquire %s %s -> %v token %d", in.client, in.via, in.mode, in.name, out.outcome, out.token)
	},
}

func withReader(readers string, c int, add bool) string {
	var ids []int
	for _, f := range strings.Fields(readers) {
		v, _ := strconv.Atoi(f)
		if v != c {
			ids = append(ids, v)
		}
	}
	if add {
		ids = append(ids, c)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, v := range ids {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " ")
}

func (o outcome) String() string {
	return [...]string{"?", "granted", "refused", "unknown"}[o]
}

// checkHistory runs every check on a history and fails t with what broke;
// it returns a one-line summary.
func checkHistory(t *testing.T, h []histOp) string {
	t.Helper()
	if dir := os.Getenv("SLUICE_HISTORY_DIR"); dir != "" {
		dumpHistory(t, filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".txt"), h)
	}
	problems, sum := historyProblems(h)
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
		}
		t.Fatalf("the history breaks the lock's rules (%s):\n%s", sum, strings.Join(problems, "\n"))
	}
	return sum
}

// historyProblems runs every check on a history: what broke, and a
// one-line summary.
func historyProblems(h []histOp) ([]string, string) {
	var problems []string
	problems = append(problems, checkExclusion(h)...)
	problems = append(problems, checkTokenOrder(h)...)
	problems = append(problems, checkLeaseIDs(h)...)
	verdict := checkLinearizable(h)
	if verdict != "linearizable" {
		problems = append(problems, "porcupine: "+verdict)
	}
	return problems, summarize(h) + "; porcupine: " + verdict
}

// summarize counts grants, refusals by reason, and unknown outcomes.
func summarize(h []histOp) string {
	grants, unknowns := 0, 0
	refusals := map[string]int{}
	var last time.Duration
	for _, o := range h {
		last = max(last, o.ret)
		switch {
		case o.end:
		case o.outcome == granted:
			grants++
		case o.outcome == refused:
			refusals[reason(o.why)]++
		default:
			unknowns++
		}
	}
	var rs []string
	for _, why := range slices.Sorted(maps.Keys(refusals)) {
		rs = append(rs, fmt.Sprintf("%s %d", why, refusals[why]))
	}
	rate := 0.0
	if last > 0 {
		rate = float64(grants) / last.Seconds()
	}
	return fmt.Sprintf("%d grants in %v (%.0f/s), refused: [%s], %d unknown outcomes", grants, last.Round(time.Millisecond),
		rate, strings.Join(rs, ", "), unknowns)
}

// use is when a Go client acted under a lease: from its acquire's return
// to its end.
type use struct {
	acq      histOp
	from, to time.Duration
}

// uses pairs granted acquires with their ends.
func uses(h []histOp, exactOnly bool) []use {
	ends := map[string]histOp{}
	for _, o := range h {
		if o.end {
			ends[fmt.Sprintf("%d/%s/%d", o.client, o.name, o.token)] = o
		}
	}
	var out []use
	for _, o := range h {
		if o.end || o.outcome != granted || exactOnly && !o.exactUse {
			continue
		}
		u := use{acq: o, from: o.ret, to: 1<<62 - 1}
		if e, ok := ends[fmt.Sprintf("%d/%s/%d", o.client, o.name, o.token)]; ok {
			u.to = e.call
		}
		out = append(out, u)
	}
	return out
}

// checkExclusion: no two Go clients used one name at once unless both
// were readers (by the clients' own clocks: one clock, one process).
func checkExclusion(h []histOp) []string {
	var out []string
	byName := map[string][]use{}
	for _, u := range uses(h, true) {
		byName[u.acq.name] = append(byName[u.acq.name], u)
	}
	for _, us := range byName {
		sort.Slice(us, func(i, j int) bool { return us[i].from < us[j].from })
		for i, a := range us {
			for _, b := range us[i+1:] {
				if b.from >= a.to {
					break
				}
				if a.acq.writes() || b.acq.writes() {
					out = append(out, fmt.Sprintf("%s: client %d (%s, token %d) used it from %v to %v, client %d (%s, token %d) from %v",
						a.acq.name, a.acq.client, a.acq.mode, a.acq.token, a.from, a.to, b.acq.client, b.acq.mode, b.acq.token, b.from))
				}
			}
		}
	}
	return out
}

// checkTokenOrder: a grant whose acquire began after another grant of the
// same name returned carries a larger token than that grant, when the
// earlier one is a writer's or the later one a priority or exclusive
// writer's. Readers need not: the readers of one agent share its read
// ticket, and so its number, and a reader that passed a waiting soft
// writer holds a number above it (the simulator's rule, checkGrantToken).
func checkTokenOrder(h []histOp) []string {
	var out []string
	byName := map[string][]histOp{}
	for _, o := range h {
		if !o.end && o.outcome == granted {
			byName[o.name] = append(byName[o.name], o)
		}
	}
	for name, gs := range byName {
		byRet := slices.Clone(gs)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		sort.Slice(gs, func(i, j int) bool { return gs[i].call < gs[j].call })
		k := 0
		var top, topWriter histOp
		for _, g := range gs {
			for ; k < len(byRet) && byRet[k].ret < g.call; k++ {
				if byRet[k].token > top.token {
					top = byRet[k]
				}
				if byRet[k].writes() && byRet[k].token > topWriter.token {
					topWriter = byRet[k]
				}
			}
			above := topWriter
			if g.mode == semaphore.ReadWritePriority || g.mode == semaphore.Exclusive {
				above = top
			}
			if above.token > 0 && g.token <= above.token {
				out = append(out, fmt.Sprintf("%s: client %d (%s) got token %d (acquire from %v), after client %d (%s) got %d (returned %v)",
					name, g.client, g.mode, g.token, g.call, above.client, above.mode, above.token, above.ret))
			}
		}
	}
	return out
}

// checkLeaseIDs: no lease id is given twice.
func checkLeaseIDs(h []histOp) []string {
	var out []string
	seen := map[string]histOp{}
	for _, o := range h {
		if o.end || o.outcome != granted || o.lease == "" {
			continue
		}
		if p, ok := seen[o.lease]; ok {
			out = append(out, fmt.Sprintf("lease id %s given twice: to client %d (%s) and client %d (%s)", o.lease, p.client, p.name, o.client, o.name))
		}
		seen[o.lease] = o
	}
	return out
}

// checkLinearizable runs porcupine on the history: "linearizable", or what
// went wrong.
func checkLinearizable(h []histOp) string {
	// Refused and unknown acquires stay in the history (counted, dumped)
	// but not in porcupine's search: whether or not an unknown one took
	// effect (it may have: its interval runs to the end of the history),
	// its client never acted under it, so in the model it changes nothing
	// and fits anywhere; leaving such no-ops out changes no verdict and
	// spares porcupine a search over where to put them (with a hundred of
	// them after a kill, it ran past its time on a loaded machine).
	var ops []porcupine.Operation
	for _, o := range h {
		if !o.end && o.outcome != granted {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: o.client, Input: o, Output: fenceOut{o.outcome, o.token},
			Call: int64(o.call), Return: int64(o.ret)})
	}
	switch res := porcupine.CheckOperationsTimeout(fencedLockModel, ops, 3*time.Minute); res {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "not linearizable as a fenced reader/writer lock"
	default:
		return fmt.Sprintf("check did not finish (%s)", res)
	}
}

// dumpHistory writes h, one operation per line in call order, for a
// failure's post-mortem (SLUICE_HISTORY_DIR).
func dumpHistory(t *testing.T, path string, h []histOp) {
	h = slices.Clone(h)
	sort.SliceStable(h, func(i, j int) bool { return h[i].call < h[j].call })
	var b strings.Builder
	for _, o := range h {
		kind := "acquire"
		if o.end {
			kind = "end"
		}
		fmt.Fprintf(&b, "%12d %12d %-3s client %2d %-7s %s %-19s %-8v token %4d lease %s %s\n", o.call, o.ret, o.via, o.client, kind,
			o.name, o.mode, o.outcome, o.token, o.lease, o.why)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("history not written: %v", err)
		return
	}
	t.Logf("history written to %s", path)
}
