package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// previousRelease is the release before this one and its commit, as the
// changelog names them ("## 0.8.0", then "Commit 272851f").
func previousRelease(t *testing.T) (version, commit string) {
	t.Helper()
	b, err := os.ReadFile("../cmd/sluice/CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (\S+)\n\n[^\n]*?Commit ([0-9a-f]{7,40})`).FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 || m[0][1] == semaphore.Version {
		t.Fatalf("the changelog names no earlier release with its commit")
	}
	return m[0][1], m[0][2]
}

// buildPrevious builds the previous release's binary from the
// repository's history.
func buildPrevious(t *testing.T) string {
	t.Helper()
	version, commit := previousRelease(t)
	src := t.TempDir()
	archive := exec.Command("bash", "-c", `set -o pipefail; git archive "$1" | tar -x -C "$2"`, "archive", commit, src)
	archive.Dir = ".."
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the previous release %s (commit %s) is not in this checkout's history, which the mixed-version test needs: %v\n%s",
			version, commit, err, out)
	}
	bin := filepath.Join(t.TempDir(), "sluice-"+version)
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release %s: %v\n%s", version, err, out)
	}
	return bin
}

// TestFaultMixedVersions: five agents of the previous release under the
// fault suite's workload are replaced one by one by this release's, the
// leaders last, holding the cluster's codec back (--hold-codec); then back
// to the previous release; then to this one again without the hold, so
// the cluster's codec moves, after which the previous release refuses an
// agent's store. Drains held through the first and the last agent
// replaced keep their leases throughout; the history must hold every rule
// (exclusion, tokens growing, lease ids never repeated, porcupine), and
// the run says the longest time without a grant and how many there were.
func TestFaultMixedVersions(t *testing.T) {
	c := newFaultCluster(t, 5, false)
	old := buildPrevious(t)
	oldVersion, _ := previousRelease(t)
	for _, n := range c.nodes {
		n.bin = old
	}
	r := startFaultRun(t, c)
	r.run(2 * time.Second)
	leaders := c.leaders(0)
	order := append(c.others(leaders...), leaders...)
	first := r.holdLong(order[0], "/a", semaphore.ReadWritePriority, 10*time.Second, 15*time.Second)
	last := r.holdLong(order[len(order)-1], "/b", semaphore.Exclusive, 10*time.Second, 25*time.Second)
	r.run(time.Second)
	begin := r.w.rec.now()
	// phases are the times each round of replacements began, and what it
	// stopped: an agent's graceful stop lets its shared read tickets go
	// only from this release on, so the gaps are told per round.
	type phase struct {
		what     string
		from, to time.Duration
	}
	var phases []phase
	replace := func(to, version string, flags ...string) {
		stopping := oldVersion
		if c.nodes[order[0]].bin == binary {
			stopping = semaphore.Version
		}
		phases = append(phases, phase{what: fmt.Sprintf("%s agents stopped, %s started", stopping, version), from: r.w.rec.now()})
		defer func() { phases[len(phases)-1].to = r.w.rec.now() }()
		for _, i := range order {
			stopAgent(t, c.nodes[i].p)
			c.nodes[i].bin, c.nodes[i].flags = to, flags
			c.start(i)
			c.waitReady(i)
			t.Logf("%s: agent %d runs %s %s", r.w.rec.now().Round(time.Millisecond), i+1, version, strings.Join(flags, " "))
			r.run(time.Second)
		}
	}
	replace(binary, semaphore.Version, "--hold-codec", fmt.Sprint(semaphore.MinCodec))
	checkVersions(t, c, semaphore.Version, semaphore.MinCodec)
	r.wasKept(first)
	replace(old, oldVersion)
	// The previous release took a request still in its doorway (no number
	// yet) for one ahead of a holder when an agent that restarted took a
	// lease over, so the agent replaced last, now of that release, may
	// refuse the drain held through it while the workload keeps /b busy
	// (this release's tables do not: daemon's isHolder). That refusal
	// alone is let through here.
	r.wasKeptOr(last, "waits in line: it was never granted")
	replace(binary, semaphore.Version)
	checkVersions(t, c, semaphore.Version, semaphore.Codec)
	// The codec moved: the previous release refuses a store that recorded
	// it, and changes nothing in it.
	i := order[0]
	stopAgent(t, c.nodes[i].p)
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	out, err := exec.CommandContext(ctx, old, c.args(i)...).CombinedOutput()
	cancel()
	if err == nil || !strings.Contains(string(out), "unknown value version 4") {
		t.Fatalf("%s started on a store of cluster codec %d: %v\n%s", oldVersion, semaphore.Codec, err, out)
	}
	t.Logf("%s on agent %d's store after the codec moved: %s", oldVersion, i+1, lastLine(string(out)))
	c.nodes[i].bin = binary
	c.start(i)
	c.waitReady(i)
	end := r.w.rec.now()
	h := r.w.stop()
	c.waitReady()
	probeNames(t, c, r.w.names)
	t.Logf("history: %s", checkHistory(t, h))
	gap, since, grants := longestGap(h, begin, end)
	t.Logf("upgrade, downgrade and upgrade of 5 agents in %s: %d grants, the longest time without one %s (from %s)",
		(end - begin).Round(time.Millisecond), grants, gap.Round(time.Millisecond), since.Round(time.Millisecond))
	for _, p := range phases {
		gap, since, grants := longestGap(h, p.from, p.to)
		t.Logf("%s: %d grants in %s, the longest time without one %s (from %s)", p.what, grants,
			(p.to - p.from).Round(time.Millisecond), gap.Round(time.Millisecond), since.Round(time.Millisecond))
	}
	if grants == 0 {
		t.Fatal("nothing was granted while the agents were replaced")
	}
	r.res.check(t, c)
	c.stopAll()
}

// lastLine is the last line of out that is not empty.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// checkVersions: every member runs version, as the members list of each
// agent says, all read this build's codec, and the cluster's codec is
// level. An agent learns a restarted peer's release when the peer
// reconnects (libp2p identify) or announces itself, and the level with
// the view that raises it: polled, bounded.
func checkVersions(t *testing.T, c *faultCluster, version string, level int) {
	t.Helper()
	for _, n := range c.nodes {
		for deadline := time.Now().Add(bound); ; time.Sleep(100 * time.Millisecond) {
			code, out, errs := sluice(t, n.sock, "members", "--json")
			var l api.MemberList
			if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
				t.Fatalf("members: %d %q %q", code, out, errs)
			}
			var versions []string
			for _, m := range l.Members {
				versions = append(versions, fmt.Sprintf("%s:%s/%d(offers %d)", m.Name, m.Version, m.Codec, m.Offers))
			}
			if l.Codec == semaphore.Codec && l.Level == level &&
				!slices.ContainsFunc(l.Members, func(m api.MemberInfo) bool { return m.Version != version || m.Codec != semaphore.Codec }) {
				break
			}
			if time.Now().After(deadline) {
				var views []string
				for _, o := range c.nodes {
					_, out, _ := sluice(t, o.sock, "members", "--json")
					var ol api.MemberList
					_ = json.Unmarshal([]byte(out), &ol)
					views = append(views, fmt.Sprintf("%s: epoch %d codec %d", o.sock, ol.Epoch, ol.Level))
				}
				t.Fatalf("after the upgrade, %s's members say %s, all read codec %d, cluster codec %d (want %d); views: %s",
					n.sock, strings.Join(versions, " "), l.Codec, l.Level, level, strings.Join(views, ", "))
			}
		}
	}
}

// longestGap is the longest time in [from, to] without a grant (a
// granted acquire's return), when it began, and the grants in [from, to].
func longestGap(h []histOp, from, to time.Duration) (gap, since time.Duration, grants int) {
	var at []time.Duration // the grants' times
	for _, o := range h {
		if !o.end && o.outcome == granted && o.ret >= from && o.ret <= to {
			at = append(at, o.ret)
		}
	}
	slices.Sort(at)
	prev := from
	for _, a := range append(at, to) {
		if a-prev > gap {
			gap, since = a-prev, prev
		}
		prev = a
	}
	return gap, since, len(at)
}
