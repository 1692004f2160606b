package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
)

// docFiles are the project's documents whose commands run as tests: the
// README, the operator's manual, the design, and testing.
var docFiles = []string{"../README.md", "../cmd/sluice/MANUAL.md", "../core/HOW_IT_WORKS.md", "TESTING.md"}

// docs is the documents' text, one after the other in docFiles' order.
func docs(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	for _, f := range docFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	return all.String()
}

// docAfter is the documents' text after marker, the start of what they
// must have (what, for the failure).
func docAfter(t *testing.T, marker, what string) string {
	t.Helper()
	_, rest, ok := strings.Cut(docs(t), marker)
	if !ok {
		t.Fatalf("the documents have no %s", what)
	}
	return rest
}

// readmeBlock is the first fenced block of lang in the documents.
func readmeBlock(t *testing.T, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(docs(t), "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("README has no %s block", lang)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README's %s block does not end", lang)
	}
	return block + "\n"
}

// TestReadmeExamples runs the README's Python and PHP frontends as
// written against a real agent: a page on a free site, the maintenance
// page during a drain, and the lock given back each time.
func TestReadmeExamples(t *testing.T) {
	sock := startDev(t)
	dir := shortDir(t)
	for _, ex := range []struct{ lang, interp, file string }{
		{"python", "python3", "sluice_read.py"},
		{"php", "php", "sluice_read.php"},
	} {
		t.Run(ex.lang, func(t *testing.T) {
			interp, err := exec.LookPath(ex.interp)
			if err != nil {
				t.Skipf("no %s (Debian: apt-get install %s)", ex.interp, map[string]string{"python3": "python3", "php": "php-cli php-curl"}[ex.interp])
			}
			path := filepath.Join(dir, ex.file)
			if err := os.WriteFile(path, []byte(readmeBlock(t, ex.lang)), 0o644); err != nil {
				t.Fatal(err)
			}
			runOn := func(sock string) string {
				t.Helper()
				// Bounded, as every wait here: a hung example fails the test.
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				cmd := exec.CommandContext(ctx, interp, path)
				cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", ex.interp, ex.file, err, out)
				}
				return string(out)
			}
			run := func() string { t.Helper(); return runOn(sock) }
			// No agent at the socket: the maintenance page, not a crash.
			if out := runOn(filepath.Join(dir, "no-agent.sock")); out != "503 maintenance: unavailable\n" {
				t.Fatalf("with no agent: %q", out)
			}
			if out := run(); !strings.HasPrefix(out, "200 page, fencing token ") {
				t.Fatalf("on a free site: %q", out)
			}
			// A drain holds the site: the maintenance page.
			writer := start(t, "lock", "/site", "--api", sock, "--mode", "read-write-priority", "--", "sh", "-c", "echo draining; exec sleep 30")
			writer.waitLine(t, "draining")
			if out := run(); out != "503 maintenance: draining\n" {
				t.Fatalf("during a drain: %q", out)
			}
			if err := writer.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			writer.wait(t)
			// The example released its lock: a writer gets the site at once.
			if code, _, errs := sluice(t, sock, "lock", "/site", "--try", "--", "true"); code != 0 {
				t.Fatalf("the example's lock was not released: exit %d %q", code, errs)
			}
		})
	}
}

// readmeBlockAfter is the first fenced block after the README line that
// contains marker.
func readmeBlockAfter(t *testing.T, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(docs(t), marker)
	if !ok {
		t.Fatalf("README has no %q", marker)
	}
	_, rest, ok = strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README has no block after %q", marker)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README's block after %q does not end", marker)
	}
	return block
}

// TestReadmeQuickStart runs the quick start's curl lines as written, with
// S the test agent's socket (the README's S= line names the per-user
// default) and the lease id the acquire printed for the sample one.
func TestReadmeQuickStart(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl (Debian: apt-get install curl)")
	}
	sock := startDev(t)
	block := readmeBlockAfter(t, "take a lock and give it back with curl")
	sample := regexp.MustCompile(`"lease":"([0-9.]+)"`).FindStringSubmatch(block)
	if sample == nil {
		t.Fatalf("no sample lease id in the quick start:\n%s", block)
	}
	ran, lease := 0, ""
	for _, line := range strings.Split(block, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "S=") {
			continue
		}
		if lease != "" { // the release gives back the lease the acquire printed
			line = strings.ReplaceAll(line, sample[1], lease)
		}
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), "S="+sock)
		b, err := cmd.Output()
		out := string(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		ran++
		switch {
		case strings.Contains(line, "/v1/acquire"):
			var got struct {
				Lease string `json:"lease"`
				Token uint64 `json:"token"`
			}
			if json.Unmarshal(b, &got) != nil || got.Lease == "" || got.Token == 0 {
				t.Fatalf("%s: %q", line, out)
			}
			lease = got.Lease
		case strings.Contains(line, "/v1/release"):
			if strings.Contains(out, `"error"`) {
				t.Fatalf("%s: %q", line, out)
			}
		case strings.Contains(line, "/v1/status"):
			if !strings.Contains(out, `"state":"LOCK_READY"`) {
				t.Fatalf("%s: %q", line, out)
			}
		case strings.Contains(line, "/v1/locks"):
			if !strings.Contains(out, `"locks":`) {
				t.Fatalf("%s: %q", line, out)
			}
		}
	}
	if ran != 4 {
		t.Fatalf("ran %d of the quick start's curl lines, want 4:\n%s", ran, block)
	}
}

// TestReadmeSession runs the "Using it" session as written, with the
// test's build for `go run ./cmd/sluice` and its agent in SLUICE_API. A
// line ending in & runs in the background, and the next starts once its
// lock is in the table, as a person typing would see it.
func TestReadmeSession(t *testing.T) {
	sock := startDev(t)
	block := readmeBlockAfter(t, "## Using it")
	comment := regexp.MustCompile(`\s+#\s.*$`)
	var background []*proc
	ran := 0
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(comment.ReplaceAllString(line, ""))
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "go run ./cmd/sluice ") {
			t.Fatalf("the session has a line that is not a sluice command: %q", line)
		}
		line = strings.Replace(line, "go run ./cmd/sluice", binary, 1)
		ran++
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			cmd := exec.Command("bash", "-c", "exec "+strings.TrimSpace(bg))
			cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
			background = append(background, startProc(t, cmd))
			name := strings.Fields(bg)[2]
			waitHolder(t, sock, name)
			continue
		}
		cmd := exec.Command("bash", "-c", line)
		cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		want := map[string]string{"status": "LOCK_READY", "lock": "holding /jobs/report, token ", "drain": "upgrading",
			"locks": "/jobs/nightly", "unlock": "released "}[strings.Fields(line)[1]]
		if !strings.Contains(string(out), want) {
			t.Fatalf("%s: %q lacks %q", line, out, want)
		}
	}
	if ran != 7 || len(background) != 2 {
		t.Fatalf("ran %d lines of the session (%d in the background), want 7 (2):\n%s", ran, len(background), block)
	}
	// The reader ended by itself; the nightly job lost its lock to the
	// operator's unlock --force.
	if code := background[0].wait(t); code != 0 {
		t.Fatalf("the reader exited %d", code)
	}
	if code := background[1].wait(t); code != 76 {
		t.Fatalf("the force-unlocked job exited %d, want 76", code)
	}
}

// waitHolder waits until name has a holder in the agent's table: a
// background sluice lock was granted.
func waitHolder(t *testing.T, sock, name string) {
	t.Helper()
	waitLock(t, sock, name, "a holder", func(l api.Lock) bool {
		return slices.ContainsFunc(l.Entries, func(e api.Entry) bool { return e.Holder })
	})
}

// TestReadmeSwarmKey runs the README's commands that make the cluster
// secret, as written but for the file's path, and an agent takes the key.
func TestReadmeSwarmKey(t *testing.T) {
	dir := shortDir(t)
	key := filepath.Join(dir, "swarm.key")
	block := readmeBlockAfter(t, "The swarm key is 32 random bytes")
	if !strings.Contains(block, "/etc/sluice/swarm.key") {
		t.Fatalf("the swarm key block names no /etc/sluice/swarm.key:\n%s", block)
	}
	if out, err := exec.Command("bash", "-ec", strings.ReplaceAll(block, "/etc/sluice/swarm.key", key)).CombinedOutput(); err != nil {
		t.Fatalf("the README's swarm key commands: %v\n%s", err, out)
	}
	p := start(t, "agent", "--data", filepath.Join(dir, "data"), "--listen", "/ip4/127.0.0.1/tcp/0", "--psk-file", key,
		"--api", filepath.Join(dir, "api.sock"))
	p.waitLine(t, "API on")
	stopAgent(t, p)
}

// docCommands are the `sluice` command lines of the documents' sh
// blocks, a line ending in \ joined with the next, comments dropped.
func docCommands(t *testing.T) []string {
	t.Helper()
	b := docs(t)
	comment := regexp.MustCompile(`\s+#\s.*$`)
	var out []string
	for _, part := range strings.Split(string(b), "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		block = strings.ReplaceAll(block, "\\\n", " ")
		for _, line := range strings.Split(block, "\n") {
			line = strings.TrimSpace(comment.ReplaceAllString(line, ""))
			if strings.HasPrefix(line, "sluice ") {
				out = append(out, strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return out
}

// TestReadmeCommands runs the documents' sluice commands against a real
// agent, as written but for the site's upstream, ports and scripts
// (true), and the three-machine cluster's on loopback: three agents with
// their own identities and one secret, as the README makes them.
func TestReadmeCommands(t *testing.T) {
	sock := startDev(t)
	dir := shortDir(t)
	site := newUpstreamSite(t)
	scripts := strings.NewReplacer("./report.sh", "true", "./read.sh", "true", "./upgrade.sh", "true", "./migrate.sh", "true")
	var agentLine, idLine string
	ran := 0
	for _, line := range docCommands(t) {
		args := strings.Fields(scripts.Replace(line))[1:]
		switch args[0] {
		case "agent":
			agentLine = line
			continue
		case "id":
			idLine = line
			continue
		case "status":
			continue // run on the loopback cluster below
		case "proxy":
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			args = append(strings.Fields(strings.NewReplacer("0.0.0.0:80", addr, "http://127.0.0.1:8080", site.srv.URL).Replace(strings.Join(args, " "))),
				"--api", sock)
			p := start(t, args...)
			p.waitLine(t, "proxying")
			if code, body := getPage(t, http.DefaultClient, "http://"+addr+"/"); code != 200 || !strings.Contains(body, "hello from upstream") {
				t.Errorf("%s: %d %q", line, code, body)
			}
			ran++
			continue
		}
		// As a shell runs it: quoted arguments stay whole.
		cmd := exec.Command("bash", "-c", "exec "+binary+" "+strings.TrimPrefix(scripts.Replace(line), "sluice "))
		cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		want := map[string][]int{"lock": {0}, "locks": {0}, "unlock": {0, 1}, "drain": {0}, "undrain": {0, 1}, "members": {0}}[args[0]]
		if !slices.Contains(want, code) {
			t.Errorf("%s: exit %d, want one of %v\n%s", line, code, want, out)
		}
		ran++
	}
	if ran < 6 || agentLine == "" || idLine == "" {
		t.Fatalf("ran %d of the README's commands; agent line %q, id line %q", ran, agentLine, idLine)
	}

	// The three-machine cluster, on loopback: the README's secret, ids and
	// agent line, with each machine's address and directory put in.
	key := filepath.Join(dir, "swarm.key")
	_, secret, _ := strings.Cut(docs(t), "one cluster secret and copy it to all three")
	_, secret, _ = strings.Cut(secret, "```sh\n")
	secret, _, _ = strings.Cut(secret, "```")
	var printf string
	for _, l := range strings.Split(secret, "\n") {
		if strings.HasPrefix(l, "printf ") {
			printf = strings.ReplaceAll(l, "/etc/sluice/swarm.key", key)
		}
	}
	if out, err := exec.Command("bash", "-ec", printf+"; chmod 600 "+key).CombinedOutput(); printf == "" || err != nil {
		t.Fatalf("the README's secret %q: %v\n%s", printf, err, out)
	}
	ids, ports, socks := loopbackCluster(t, filepath.Join(dir, "readme"), idLine, agentLine, key)
	// The manual's line, which gives every id, makes a cluster too.
	_, manualLine, _ := strings.Cut(docs(t), "   sluice agent --name web-1 --data /var/lib/sluice \\\n")
	manualLine, _, _ = strings.Cut(manualLine, "```")
	manualLine = strings.Join(strings.Fields(strings.ReplaceAll("sluice agent --name web-1 --data /var/lib/sluice "+manualLine, "\\\n", " ")), " ")
	if !strings.Contains(manualLine, "12D3KooWA...,12D3KooWB...,12D3KooWC...") {
		t.Fatalf("the manual's agent line does not list the ids: %s", manualLine)
	}
	_, _, manualSocks := loopbackCluster(t, filepath.Join(dir, "manual"), idLine, manualLine, key)
	for _, s := range manualSocks {
		if code, out, errs := sluice(t, s, "status", "--wait-ready", "30s"); code != 0 || !strings.Contains(out, "LOCK_READY") {
			t.Fatalf("status --wait-ready on the manual's loopback cluster: %d %q %q", code, out, errs)
		}
	}
	for _, s := range socks {
		if code, out, errs := sluice(t, s, "status", "--wait-ready", "30s"); code != 0 || !strings.Contains(out, "LOCK_READY") {
			t.Fatalf("status --wait-ready on the loopback cluster: %d %q %q", code, out, errs)
		}
	}

	// A fourth machine, started with --join as the manual says, becomes a
	// member with the manual's `members add` line, and leaves with its
	// `members remove` line.
	data := filepath.Join(dir, "m4")
	code, out, errs := sluice(t, "", strings.Fields(strings.Replace(idLine, "/var/lib/sluice", data, 1))[1:]...)
	if code != 0 {
		t.Fatalf("%s: %d %q", idLine, code, errs)
	}
	id4 := strings.TrimSpace(out)
	line := strings.NewReplacer(
		"--name web-1", "--name web-4",
		"/var/lib/sluice", data,
		"/etc/sluice/swarm.key", key,
		"--initial-members peers", "--join",
		"/ip4/0.0.0.0/tcp/4001", "/ip4/127.0.0.1/tcp/"+strconv.Itoa(freePort(t)),
		"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWB...", "/ip4/127.0.0.1/tcp/"+ports[1]+"/p2p/"+ids[1],
		"/ip4/10.0.0.3/tcp/4001/p2p/12D3KooWC...", "/ip4/127.0.0.1/tcp/"+ports[2]+"/p2p/"+ids[2],
	).Replace(agentLine)
	if !strings.Contains(line, "--join") || strings.Contains(line, "...") {
		t.Fatalf("the README's agent line does not make a joining machine: %s", line)
	}
	start(t, append(strings.Fields(line)[1:], "--api", filepath.Join(data, "api.sock"))...).waitLine(t, "API on")
	manual := docs(t)
	_, add, _ := strings.Cut(manual, "$ sluice members add ")
	add, _, _ = strings.Cut(add, " ")
	_, remove, _ := strings.Cut(manual, "$ sluice members remove ")
	remove, _, _ = strings.Cut(remove, " ")
	if add == "" || remove == "" {
		t.Fatal("the manual has no `members add` or `members remove` line")
	}
	voters := func(want int) {
		t.Helper()
		code, out, errs := sluice(t, socks[0], "members", "--json")
		if code != 0 || strings.Count(out, `"voter": true`) != want {
			t.Fatalf("members: exit %d, want %d voters %q\n%s", code, want, errs, out)
		}
	}
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) { // polling: the cluster hears the new machine's hello in its own time
		code, out, errs := sluice(t, socks[0], "members", "add", strings.Replace(add, "12D3KooWF...", id4, 1))
		if code == 0 {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(errs, "never said hello") {
			t.Fatalf("members add: exit %d %q %q", code, out, errs)
		}
	}
	voters(4)
	if code, out, errs := sluice(t, socks[0], "members", "remove", strings.Replace(remove, "12D3KooWC...", id4, 1)); code != 0 {
		t.Fatalf("members remove: exit %d %q %q", code, out, errs)
	}
	voters(3)
}

// loopbackCluster starts three agents on loopback as agentLine (a
// document's, for web-1 on 10.0.0.1 with web-2 and web-3 as its peers)
// says, each with its own identity made by idLine's command in dir, and
// the secret in key. It gives their ids, ports and API sockets.
func loopbackCluster(t *testing.T, dir, idLine, agentLine, key string) (ids, ports, socks []string) {
	t.Helper()
	var datas []string
	for i := range 3 {
		data := filepath.Join(dir, fmt.Sprintf("m%d", i+1))
		code, out, errs := sluice(t, "", strings.Fields(strings.Replace(idLine, "/var/lib/sluice", data, 1))[1:]...)
		if code != 0 || !strings.HasPrefix(out, "12D3KooW") {
			t.Fatalf("%s: %d %q %q", idLine, code, out, errs)
		}
		ids, datas = append(ids, strings.TrimSpace(out)), append(datas, data)
		ports, socks = append(ports, strconv.Itoa(freePort(t))), append(socks, filepath.Join(data, "api.sock"))
	}
	for i := range 3 {
		j, k := (i+1)%3, (i+2)%3
		line := strings.NewReplacer(
			"--name web-1", fmt.Sprintf("--name web-%d", i+1),
			"/var/lib/sluice", datas[i],
			"/etc/sluice/swarm.key", key,
			"12D3KooWA...,12D3KooWB...,12D3KooWC...", strings.Join(ids, ","),
			"/ip4/0.0.0.0/tcp/4001", "/ip4/127.0.0.1/tcp/"+ports[i],
			"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWB...", "/ip4/127.0.0.1/tcp/"+ports[j]+"/p2p/"+ids[j],
			"/ip4/10.0.0.3/tcp/4001/p2p/12D3KooWC...", "/ip4/127.0.0.1/tcp/"+ports[k]+"/p2p/"+ids[k],
		).Replace(agentLine)
		if strings.Contains(line, "...") {
			t.Fatalf("the agent line has a placeholder the test does not know: %s", line)
		}
		p := start(t, append(strings.Fields(line)[1:], "--api", socks[i])...)
		p.waitLine(t, "API on")
	}
	return ids, ports, socks
}

// TestManualMembersExample: the manual's `sluice members` example has the
// real output's columns and summary line (its ids are cut short, and its
// rows elided, for the page).
func TestManualMembersExample(t *testing.T) {
	sock := startDev(t)
	example, _, _ := strings.Cut(docAfter(t, "$ sluice members\n", "`$ sluice members` example"), "\n$ ")
	lines := strings.Split(example, "\n")
	code, out, errs := sluice(t, sock, "members")
	if code != 0 {
		t.Fatalf("sluice members: %d %q", code, errs)
	}
	real := strings.Split(strings.TrimSpace(out), "\n")
	if strings.Join(strings.Fields(lines[0]), " ") != strings.Join(strings.Fields(real[0]), " ") {
		t.Errorf("the example's header %q, the real one %q", lines[0], real[0])
	}
	summary := regexp.MustCompile(`^cluster [0-9a-f]+, view epoch \d+, \d+ voters, all read codec \d+, cluster codec \d+( \(held by [^)]*\))?$`)
	if last := lines[len(lines)-1]; !summary.MatchString(last) || !summary.MatchString(real[len(real)-1]) {
		t.Errorf("the example's summary %q, the real one %q", last, real[len(real)-1])
	}
	row := regexp.MustCompile(`^\d+\s+12D3KooW\S+\s+\S+\s+/ip4/\S+\s+(yes|no)\s+(yes\s+)?(yes|no)\s+\d+\.\d+\.\d+$`)
	for _, l := range append(lines[1:3], real[1:len(real)-1]...) {
		if !row.MatchString(strings.TrimSpace(l)) {
			t.Errorf("a row that is not NODE PEER NAME ADDRESS VOTER [LEADER] REACHABLE VERSION: %q", l)
		}
	}
}

// TestManualSession runs the manual's first session as a shell runs it,
// with the built binary for `go run ./cmd/sluice`: the exclusive lock's
// command sees its token, the drain runs once the reader is done, and the
// operator's force-unlock ends the nightly job's lock.
func TestManualSession(t *testing.T) {
	sock := startDev(t)
	block, _, _ := strings.Cut(docAfter(t, "\n```\ngo run ./cmd/sluice status", "session of `go run ./cmd/sluice` lines"), "```")
	script := "set -e\n" + strings.ReplaceAll("go run ./cmd/sluice status"+block, "go run ./cmd/sluice ", binary+" ") +
		"wait %2 || echo nightly ended $?\n" // the force-unlocked job's lock; `wait` also waits for the reader
	// A person types the next line after the job started; the script
	// waits for its lock to be held, as the table shows it.
	held := "sleep 600 &\nuntil " + binary + " locks /jobs/nightly | grep -q ' held '; do sleep 0.05; done\n"
	if !strings.Contains(script, "sleep 600 &") {
		t.Fatal("the manual's session has no nightly job")
	}
	script = strings.Replace(script, "sleep 600 &", held, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(os.Environ(), "SLUICE_API="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the manual's session: %v\n%s", err, out)
	}
	for _, want := range []string{"LOCK_READY", "holding /jobs/report, token ", "upgrading", "/jobs/nightly", "nightly ended"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the manual's session printed no %q:\n%s", want, out)
		}
	}
}

// TestManualConfigFile: the manual's agent.yaml, with a machine's
// directories, ids and addresses put in, starts an agent that takes every
// setting of it: its name, its five first members, its API socket.
func TestManualConfigFile(t *testing.T) {
	dir := shortDir(t)
	yaml := readmeBlockOf(t, "yaml", "# /etc/sluice/agent.yaml")
	var ids []string
	for i := range 5 {
		code, out, errs := sluice(t, "", "id", "--data", filepath.Join(dir, fmt.Sprintf("m%d", i+1)))
		if code != 0 {
			t.Fatalf("sluice id: %d %q", code, errs)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	key := filepath.Join(dir, "swarm.key")
	if err := os.WriteFile(key, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	pairs := []string{"/var/lib/sluice", filepath.Join(dir, "m1"), "/etc/sluice/swarm.key", key, "/run/sluice/api.sock", sock,
		"/ip4/10.0.0.1/tcp/4001", "/ip4/127.0.0.1/tcp/" + strconv.Itoa(freePort(t))}
	for i, letter := range "ABCDE" {
		pairs = append(pairs, fmt.Sprintf("12D3KooW%c...", letter), ids[i])
		if i > 0 {
			pairs = append(pairs, fmt.Sprintf("/ip4/10.0.0.%d/tcp/4001/p2p/12D3KooW...", i+1),
				fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", freePort(t), ids[i]))
		}
	}
	yaml = strings.NewReplacer(pairs...).Replace(yaml)
	if strings.Contains(yaml, "...") || strings.Contains(yaml, "10.0.0.") {
		t.Fatalf("the manual's agent.yaml has a placeholder the test does not know:\n%s", yaml)
	}
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	start(t, "agent", "--config", file).waitLine(t, "API on")
	code, out, errs := sluice(t, sock, "members", "--json")
	if code != 0 || strings.Count(out, `"voter": true`) != 5 || !strings.Contains(out, `"web-1"`) {
		t.Fatalf("members of the agent started from the manual's file: %d %q\n%s", code, errs, out)
	}
}

// TestChangelogNamesThisRelease: the changelog's newest release is the
// one the binary says it is.
func TestChangelogNamesThisRelease(t *testing.T) {
	b, err := os.ReadFile("../cmd/sluice/CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "\n## ")
	newest, _, _ := strings.Cut(rest, "\n")
	code, out, _ := sluice(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "sluice "+newest+" ") || newest != semaphore.Version {
		t.Fatalf("the changelog's newest release is %q; sluice version says %q (semaphore.Version %s)", newest, out, semaphore.Version)
	}
}

// TestTestingGuideFlags: every flag the testing guide's `go test` lines
// give a package is one that package's tests define (flag.Bool("faults",
// ...)) or one of go test's own, so the guide's commands run as written.
func TestTestingGuideFlags(t *testing.T) {
	b, err := os.ReadFile("TESTING.md")
	if err != nil {
		t.Fatal(err)
	}
	goTest := regexp.MustCompile(`go test (?:-tags \S+ )?(\./[a-z]\S*?)(?:/\.\.\.)?\s(.*)`)
	flagName := regexp.MustCompile(`(?:^|\s)-([a-z][a-z0-9-]*)`)
	own := map[string]bool{"run": true, "bench": true, "benchmem": true, "benchtime": true, "count": true, "fuzz": true,
		"fuzztime": true, "timeout": true, "v": true, "short": true, "tags": true, "race": true}
	checked := 0
	for _, line := range strings.Split(string(b), "\n") {
		m := goTest.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		args, _, _ := strings.Cut(m[2], "#")
		tests, _ := filepath.Glob(filepath.Join("..", m[1], "*_test.go"))
		if len(tests) == 0 {
			t.Errorf("%q: no tests in %s", line, m[1])
			continue
		}
		var defs strings.Builder
		for _, f := range tests {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			defs.Write(b)
		}
		for _, f := range flagName.FindAllStringSubmatch(args, -1) {
			if own[f[1]] || f[1] == "rewrite" && strings.Contains(defs.String(), "cockroachdb/datadriven") {
				continue // go test's, or datadriven's
			}
			checked++
			if !strings.Contains(defs.String(), `("`+f[1]+`",`) {
				t.Errorf("%q: package %s's tests define no flag -%s", strings.TrimSpace(line), m[1], f[1])
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d of the guide's flags: the guide or this test lost its way", checked)
	}
}
