package integration

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is a network the test creates: a namespace per node, each with a
// veth link to a bridge in a switch namespace of its own. Nothing touches
// the host's namespace. Partitions are blackhole routes inside the nodes'
// namespaces, so they cut both ways and heal without a trace.
type netLab struct {
	t      *testing.T
	sw     string   // the switch namespace
	ns, ip []string // per node
	cuts   [][2]int // blackholed (from, to) pairs
}

// labSkip says why this machine cannot run the lab ("": it can).
func labSkip() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no ip tool (iproute2)"
	}
	return ""
}

func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if why := labSkip(); why != "" {
		t.Skipf("partition tests skipped: %s", why)
	}
	tag := make([]byte, 3)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	id := runTag() + "-" + hex.EncodeToString(tag) // sweepDeadRuns reads the pid
	l := &netLab{t: t, sw: "slsw" + id}
	cleanup(t, func() {
		for _, ns := range append(l.ns, l.sw) {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	l.exec("netns", "add", l.sw)
	l.exec("-n", l.sw, "link", "set", "lo", "up")
	l.exec("-n", l.sw, "link", "add", "br0", "type", "bridge")
	l.exec("-n", l.sw, "link", "set", "br0", "up")
	for i := range n {
		ns := fmt.Sprintf("sl%sn%d", id, i+1)
		ip := fmt.Sprintf("10.77.0.%d", i+1)
		l.ns, l.ip = append(l.ns, ns), append(l.ip, ip)
		l.exec("netns", "add", ns)
		l.exec("-n", ns, "link", "set", "lo", "up")
		veth, port := "v"+fmt.Sprint(i+1), "p"+fmt.Sprint(i+1)
		l.exec("link", "add", veth, "netns", ns, "type", "veth", "peer", "name", port, "netns", l.sw)
		l.exec("-n", ns, "addr", "add", ip+"/24", "dev", veth)
		l.exec("-n", ns, "link", "set", veth, "up")
		l.exec("-n", l.sw, "link", "set", port, "master", "br0")
		l.exec("-n", l.sw, "link", "set", port, "up")
	}
	return l
}

// exec runs the ip tool.
func (l *netLab) exec(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// partition cuts every link between side and the other nodes, both ways.
func (l *netLab) partition(side ...int) {
	l.t.Helper()
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	for a := range l.ns {
		for b := range l.ns {
			if a != b && in[a] != in[b] {
				l.exec("-n", l.ns[a], "route", "add", "blackhole", l.ip[b]+"/32")
				l.cuts = append(l.cuts, [2]int{a, b})
			}
		}
	}
}

// heal removes every cut.
func (l *netLab) heal() {
	l.t.Helper()
	for _, c := range l.cuts {
		l.exec("-n", l.ns[c[0]], "route", "del", "blackhole", l.ip[c[1]]+"/32")
	}
	l.cuts = nil
}
