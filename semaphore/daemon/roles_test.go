package daemon_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// tokenFile writes a token to a file only its owner reads, for --role.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAPIRoles calls the API over TCP as three callers its tokens name: a
// frontend on /site/, a deploy job (writer on /deploy/, frontend on
// /site/) and the operator. Each refusal is a 403 forbidden that changes
// nothing; leases are their owner's or an operator's.
func TestAPIRoles(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	fe, job := tokenFile(t, "fe-token"), tokenFile(t, "job-token")
	agent, c, base := apiAgent(t, addr, "op-token", "token:"+fe+"=frontend:/site/", "token:"+job+"=writer:/deploy/",
		"token:"+job+"=frontend:/site/")
	as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
	const op = "op-token"
	forbidden := func(what string, a answer) {
		t.Helper()
		if a.status != 403 || a.body["error"] != "forbidden" {
			t.Fatalf("%s: %d %s, want 403 forbidden", what, a.status, a.raw)
		}
	}
	ok := func(what string, a answer) answer {
		t.Helper()
		if a.status != 200 {
			t.Fatalf("%s: %d %s", what, a.status, a.raw)
		}
		return a
	}

	// A frontend: page views on its prefix, and nothing else.
	page := ok("a page view", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/site/a","mode":"read-only","owner":"php-fpm"}`, as("fe-token")...))
	ok("a limited reader", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/site/b","mode":"read-only","limit":2,"try":true}`, as("fe-token")...))
	forbidden("a frontend's drain", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/site/a","mode":"read-write-priority","try":true}`, as("fe-token")...))
	forbidden("a page view off its prefix", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/shop/a","mode":"read-only","try":true}`, as("fe-token")...))
	a := call(t, c, "POST", base+"/v1/acquire", `{"name":"/site/x","try":true}`, as("fe-token")...)
	forbidden("a frontend's exclusive lock", a)
	if !strings.Contains(a.raw, "writer role") {
		t.Errorf("the refusal does not say the role it needs: %s", a.raw)
	}
	ok("status", call(t, c, "GET", base+"/v1/status", "", as("fe-token")...))
	ok("metrics", call(t, c, "GET", base+"/metrics", "", as("fe-token")...))
	ok("its prefix's table", call(t, c, "GET", base+"/v1/locks?prefix=/site/&local=true", "", as("fe-token")...))
	forbidden("every name's table", call(t, c, "GET", base+"/v1/locks?local=true", "", as("fe-token")...))
	forbidden("a force-unlock", call(t, c, "POST", base+"/v1/force-unlock", `{"name":"/site/a","token":1}`, as("fe-token")...))
	forbidden("a membership change", call(t, c, "POST", base+"/v1/members", `{"remove":"9"}`, as("fe-token")...))
	forbidden("a vouch", call(t, c, "POST", base+"/v1/members/vouch", "", as("fe-token")...))

	// The deploy job: a drain of its prefix, not of another's.
	drain := ok("a drain of its prefix", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/deploy/app","mode":"read-write-priority","owner":"deploy.sh"}`, as("job-token")...))
	forbidden("a drain of another prefix", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/shop/app","mode":"read-write-priority","try":true}`, as("job-token")...))
	jobPage := ok("the job's page view", call(t, c, "POST", base+"/v1/acquire",
		`{"name":"/site/a","mode":"read-only","owner":"deploy.sh check"}`, as("job-token")...))

	// Leases are their owners': the frontend may not end, renew or watch
	// the job's; the job may not end the frontend's.
	lease := func(a answer) string { return a.body["lease"].(string) }
	forbidden("a release of another's lease", call(t, c, "POST", base+"/v1/release",
		fmt.Sprintf(`{"lease":%q}`, lease(jobPage)), as("fe-token")...))
	forbidden("a renewal of another's lease", call(t, c, "POST", base+"/v1/renew",
		fmt.Sprintf(`{"lease":%q}`, lease(drain)), as("fe-token")...))
	forbidden("a watch of another's lease", call(t, c, "GET", base+"/v1/watch?lease="+lease(drain), "", as("fe-token")...))
	forbidden("the job's release of a page view", call(t, c, "POST", base+"/v1/release",
		fmt.Sprintf(`{"lease":%q}`, lease(page)), as("job-token")...))

	// Owners are shown to operators, and to each caller for its own.
	tbl := ok("the frontend's table", call(t, c, "GET", base+"/v1/locks?prefix=/site/&local=true", "", as("fe-token")...))
	if !strings.Contains(tbl.raw, "php-fpm") || strings.Contains(tbl.raw, "deploy.sh") {
		t.Errorf("the frontend sees owners other than its own: %s", tbl.raw)
	}
	tbl = ok("the operator's table", call(t, c, "GET", base+"/v1/locks?local=true", "", as(op)...))
	if !strings.Contains(tbl.raw, "php-fpm") || !strings.Contains(tbl.raw, "deploy.sh") {
		t.Errorf("the operator does not see every owner: %s", tbl.raw)
	}

	// Nothing the refusals touched changed: both leases renew by their
	// owners, the operator may end the job's, each owner ends its own.
	ok("the job renews its drain", call(t, c, "POST", base+"/v1/renew", fmt.Sprintf(`{"lease":%q}`, lease(drain)), as("job-token")...))
	ok("the frontend ends its page view", call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease(page)), as("fe-token")...))
	ok("the operator ends the job's page view", call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease(jobPage)), as(op)...))
	ok("the job ends its drain", call(t, c, "POST", base+"/v1/release", fmt.Sprintf(`{"lease":%q}`, lease(drain)), as("job-token")...))

	// A writer may end the readers of its names (a drain's grace), a
	// frontend may not, nor a writer elsewhere.
	forbidden("a frontend's revocation of readers", call(t, c, "POST", base+"/v1/force-unlock",
		`{"name":"/site/a","readers":true}`, as("fe-token")...))
	forbidden("the job's revocation of another prefix's readers", call(t, c, "POST", base+"/v1/force-unlock",
		`{"name":"/site/a","readers":true}`, as("job-token")...))
	ok("the job's revocation of its prefix's readers", call(t, c, "POST", base+"/v1/force-unlock",
		`{"name":"/deploy/app","readers":true}`, as("job-token")...))

	// The audit names callers by their tokens, not by what the request
	// says: a force-unlock signed "root@admin" by the job is refused and
	// not audited as done; the operator's is.
	forbidden("the job's force-unlock", call(t, c, "POST", base+"/v1/force-unlock",
		`{"name":"/deploy/app","token":1,"by":"root@admin"}`, as("job-token")...))
	if a := call(t, c, "POST", base+"/v1/force-unlock", `{"name":"/deploy/app","token":999999,"by":"root@admin"}`,
		as(op)...); a.status != 404 {
		t.Fatalf("the operator's force-unlock of a token nobody holds: %d %s", a.status, a.raw)
	}
	var actions []string
	for _, n := range agent.Node().Audit() {
		actions = append(actions, fmt.Sprintf("%s %s %s by %s (said %s)", n.Action, n.Name, n.Outcome, n.By, n.Said))
	}
	got := strings.Join(actions, "\n")
	for _, want := range []string{
		"force_unlock /deploy/app unknown_lease by the holder of token --api-token-file (said root@admin)",
		"write_lock_released /deploy/app ok by the holder of token " + job + " (said deploy.sh)",
		"write_lock /deploy/app ok by the holder of token " + job + " (said deploy.sh)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the audit lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "revoke_readers /deploy/app ok by the holder of token "+job) {
		t.Errorf("the audit lacks the job's revocation:\n%s", got)
	}
	if strings.Count(got, "force_unlock") != 1 {
		t.Errorf("a refused force-unlock is in the audit as done:\n%s", got)
	}

	m := ok("metrics", call(t, c, "GET", base+"/metrics", "", as(op)...))
	for _, want := range []string{`sluice_api_forbidden_total{action="acquire"} 4`, `sluice_api_forbidden_total{action="force_unlock"} 4`,
		`sluice_api_forbidden_total{action="release"} 2`, `sluice_api_forbidden_total{action="locks"} 1`} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestClusterAudit: a write lock taken through one agent is in every
// agent's list of the cluster's audit notes, with the agent it went
// through and the caller the kernel named.
func TestClusterAudit(t *testing.T) {
	c := startCluster(t, clusterOpts{size: 3})
	c.waitReady()
	access, err := daemon.NewAccess(daemon.AccessConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	by := daemon.WithCaller(ctx, access.Peer(0, 0, int32(os.Getpid())))
	l, err := c.node(1).Acquire(by, daemon.Request{Name: "/deploy", Mode: semaphore.ReadWritePriority,
		Timeout: 10 * time.Second, Duration: time.Minute, Owner: "deploy.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.node(1).Release(by, l.ID, "/deploy"); err != nil {
		t.Fatal(err)
	}
	notes, err := c.node(0).ClusterAudit(ctx, c.agents[0].Host())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		got = append(got, fmt.Sprintf("%s %s %s %s by %s", n.Node, n.Action, n.Name, n.Outcome, n.By))
	}
	want := []string{"n2 write_lock_released /deploy ok by uid 0", "n2 write_lock /deploy ok by uid 0"}
	if len(got) != 2 || !strings.HasPrefix(got[0], want[0]) || !strings.HasPrefix(got[1], want[1]) {
		t.Fatalf("node 1's list of the cluster's audit:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(notes[0].Command, "daemon.test") {
		t.Errorf("the command line from /proc: %q", notes[0].Command)
	}
}
