package integration

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentHygiene: the real binary refuses, with exit 64 and one clean
// line, an agent that other machines could join without a cluster secret
// (the default --listen is every interface), and secrets in files others
// may read; the same agents start once the files are private, on loopback,
// or with --insecure stated.
func TestAgentHygiene(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	psk := filepath.Join(dir, "swarm.key")
	key := strings.Repeat("ab", 32)
	if err := os.WriteFile(psk, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o604); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The default --listen, /ip4/0.0.0.0/tcp/4001, and no secret.
		{[]string{"--data", filepath.Join(dir, "a")}, "without a cluster secret"},
		{[]string{"--data", filepath.Join(dir, "b"), "--listen", "/ip4/10.1.2.3/tcp/4001"}, "--insecure"},
		{[]string{"--data", filepath.Join(dir, "c"), "--listen", "/dns4/node1.example/tcp/4001"}, "--insecure"},
		// A secret others can read.
		{[]string{"--data", filepath.Join(dir, "d"), "--psk-file", psk}, "mode 0644: chmod 0600"},
		{[]string{"--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--api-token-file", token}, "mode 0604: chmod 0600"},
	} {
		code, _, errs := sluice(t, "", append([]string{"agent", "--api", sock}, tc.args...)...)
		if code != 64 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 64 and %q", tc.args, code, errs, tc.want)
		}
		oneLine(t, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "badger")); err == nil {
		t.Error("a refused agent created its store")
	}

	// Private files, loopback: it starts. (Other machines are not reached:
	// a test talks to loopback only.)
	if err := os.Chmod(psk, 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "agent", "--data", filepath.Join(dir, "e"), "--listen", "/ip4/127.0.0.1/tcp/0", "--psk-file", psk, "--api", sock)
	p.waitLine(t, "API on")
	stopAgent(t, p)
}

// TestCLIRefusesBadRequests: a lock name with a control character (a
// newline would add rows to `sluice locks`) or invalid UTF-8, and a lease
// shorter than the agents' tick, are usage errors before any call.
func TestCLIRefusesBadRequests(t *testing.T) {
	sock := filepath.Join(shortDir(t), "none.sock") // no agent: refused before any call
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "/a\n/b holder", "--", "true"}, "control character"},
		{[]string{"lock", "/a\x1b[2J", "--", "true"}, "control character"},
		{[]string{"lock", "/a\xff", "--", "true"}, "UTF-8"},
		{[]string{"lock", "/a", "--duration", "1ns", "--", "true"}, "under 10ms"},
		{[]string{"drain", "/a\nb", "--", "true"}, "control character"},
	} {
		code, _, errs := sluice(t, sock, tc.args...)
		if code != 64 || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 64 and %q", tc.args, code, errs, tc.want)
		}
		oneLine(t, errs)
	}
}

// TestAPISocketForOtherUsers: --api-mode and --api-group open the API
// socket to the frontends' group; bad values are refused.
func TestAPISocketForOtherUsers(t *testing.T) {
	dir := shortDir(t)
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Skipf("no name for this process's group: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--api-mode", "0777"}, "--api-mode"},
		{[]string{"--api-mode", "0400"}, "--api-mode"},
		{[]string{"--api-mode", "rw"}, "--api-mode"},
		{[]string{"--api-group", "no-such-group-sluice"}, "--api-group"},
	} {
		args := append([]string{"agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", filepath.Join(dir, "bad.sock")}, tc.args...)
		code, _, errs := sluice(t, "", args...)
		if code != 64 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 64 and %q", tc.args, code, errs, tc.want)
		}
		oneLine(t, errs)
	}
	sock := filepath.Join(dir, "run", "api.sock")
	p := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--api-mode", "0660", "--api-group", g.Name)
	p.waitLine(t, "API on")
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 || st.Sys().(*syscall.Stat_t).Gid != uint32(os.Getgid()) {
		t.Errorf("socket mode %04o gid %d, want 0660 and %d", st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid, os.Getgid())
	}
	if d, err := os.Stat(filepath.Dir(sock)); err != nil || d.Mode().Perm() != 0o711 {
		t.Errorf("socket directory: %v %v, want mode 0711 (search only)", d.Mode(), err)
	}
	waitReady(t, unixClient(sock))
	stopAgent(t, p)
}

// TestSystemdNotify: started by systemd as Type=notify ($NOTIFY_SOCKET),
// the agent says READY=1 once it serves its API, and STOPPING=1 when told
// to stop.
func TestSystemdNotify(t *testing.T) {
	dir := shortDir(t)
	notify := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sock := filepath.Join(dir, "api.sock")
	cmd := exec.Command(binary, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
	p := startProc(t, cmd)
	read := func(want string) {
		t.Helper()
		if err := conn.SetReadDeadline(time.Now().Add(bound)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil || !strings.HasPrefix(string(buf[:n]), want) {
			t.Fatalf("notification %q (%v), want %q first", buf[:n], err, want)
		}
	}
	read("READY=1\nSTATUS=serving the API on " + sock)
	// Ready means serving: the socket answers.
	waitReady(t, unixClient(sock))
	stopAgent(t, p)
	read("STOPPING=1")
}

// TestCLILockSignals: signals reach the command of `sluice lock` once; a
// hang-up ends it and releases the lock; a lease lost while it runs exits
// 76, told apart from the command's own failure.
func TestCLILockSignals(t *testing.T) {
	sock := startDev(t)
	dir := shortDir(t)
	seen := filepath.Join(dir, "seen")
	// The command counts the signals it gets, and leaves on a hang-up.
	script := `trap 'echo INT >> "$SEEN"; echo got-INT' INT; trap 'echo HUP >> "$SEEN"; exit 3' HUP; echo ready; while :; do sleep 0.05; done`
	cmd := exec.Command(binary, "lock", "/sig", "--api", sock, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "SEEN="+seen)
	// sluice in a process group of its own, without a terminal: a signal
	// to that group is what a terminal's Ctrl-C would be.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := startProc(t, cmd)
	p.waitLine(t, "ready")
	lines := func() []string {
		b, _ := os.ReadFile(seen)
		return strings.Fields(string(b))
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "got-INT") // the command took it
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 3 {
		t.Fatalf("sluice lock after a hang-up exited %d, want the command's 3", code)
	}
	if got := strings.Join(lines(), " "); got != "INT HUP" {
		t.Fatalf("the command saw %q, want one INT and one HUP", got)
	}
	if code, _, errs := sluice(t, sock, "lock", "/sig", "--try", "--", "true"); code != 0 {
		t.Fatalf("the lock was not released after the hang-up: exit %d %q", code, errs)
	}

	// A lease force-unlocked while the command runs: the command gets
	// SIGTERM, and sluice lock exits 76, whatever the command's status.
	holder := start(t, "lock", "/lost", "--api", sock, "--", "sh", "-c", "trap 'exit 0' TERM; echo holding; while :; do sleep 0.05; done")
	holder.waitLine(t, "holding")
	if code, _, errs := sluice(t, sock, "unlock", "--force", "/lost"); code != 0 {
		t.Fatalf("unlock --force: exit %d %q", code, errs)
	}
	if code := holder.wait(t); code != 76 {
		t.Fatalf("sluice lock whose lease was lost exited %d, want 76", code)
	}
}

// TestCLILimitAndDrainTry: `lock --limit N` is a counting semaphore of
// readers; `drain --try` runs its command only on a name nobody holds.
func TestCLILimitAndDrainTry(t *testing.T) {
	sock := startDev(t)
	holder := start(t, "lock", "/pool", "--api", sock, "--mode", "read-only", "--limit", "1", "--", "sh", "-c", "echo holding; exec sleep 30")
	holder.waitLine(t, "holding")
	if code, _, errs := sluice(t, sock, "lock", "/pool", "--mode", "read-only", "--limit", "1", "--try", "--", "true"); code != 75 {
		t.Errorf("a second reader past --limit 1: exit %d %q, want 75", code, errs)
	}
	if code, _, errs := sluice(t, sock, "lock", "/pool", "--mode", "read-only", "--limit", "2", "--try", "--", "true"); code != 0 {
		t.Errorf("a second reader within --limit 2: exit %d %q", code, errs)
	}
	// A drain that may not wait: refused while the reader holds.
	if code, _, errs := sluice(t, sock, "drain", "/pool", "--try", "--", "true"); code != 75 {
		t.Errorf("drain --try on a held name: exit %d %q, want 75", code, errs)
	}
	// One on a name a page view holds through the agent's shared read
	// ticket: refused, and no page view was turned away for it.
	viewer := start(t, "lock", "/shop", "--api", sock, "--mode", "read-only", "--try", "--", "sh", "-c", "echo viewing; exec sleep 30")
	viewer.waitLine(t, "viewing")
	if code, _, errs := sluice(t, sock, "drain", "/shop", "--try", "--", "true"); code != 75 {
		t.Errorf("drain --try on a name a page view holds: exit %d %q, want 75", code, errs)
	}
	if code, _, errs := sluice(t, sock, "lock", "/shop", "--mode", "read-only", "--try", "--", "true"); code != 0 {
		t.Errorf("a page view after a failed drain --try: exit %d %q (turned away for a try that ran nothing)", code, errs)
	}
	if err := viewer.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	viewer.wait(t)
	if code, out, errs := sluice(t, sock, "drain", "/free", "--try", "--", "echo", "maintenance"); code != 0 || out != "maintenance\n" ||
		!strings.Contains(errs, "draining /free: granted after ") || !strings.Contains(errs, "running echo maintenance") {
		t.Errorf("drain --try on a free name: exit %d %q %q", code, out, errs)
	}
	// A gentle drain shows the reader leave, its quiet period's countdown,
	// then when CMD starts. The countdown is on screen only while the
	// quiet period runs, and the drain reads the table every 200 ms: the
	// period is long enough for a loaded machine to show it.
	reader := start(t, "lock", "/quiet", "--api", sock, "--mode", "read-only", "--", "sh", "-c", "echo reading; exec sleep 30")
	reader.waitLine(t, "reading")
	gentle := start(t, "drain", "/quiet", "--api", sock, "--mode", "gentle", "--quiet", "5s", "--", "echo", "quiet now")
	gentle.waitLine(t, "draining /quiet (gentle): 1 readers left")
	if err := reader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	reader.wait(t)
	if line := gentle.waitLine(t, "0 readers left"); !strings.Contains(line, "; quiet period: ") || !strings.Contains(line, "of 5s to go") {
		t.Errorf("gentle drain, once the reader left: %q", line)
	}
	gentle.waitLine(t, "running echo quiet now")
	gentle.waitLine(t, "quiet now")
	if code := gentle.wait(t); code != 0 {
		t.Errorf("gentle drain: exit %d", code)
	}
	for _, args := range [][]string{
		{"lock", "/pool", "--limit", "2", "--", "true"}, // not read-only
		{"lock", "/pool", "--mode", "read-only", "--limit=-1", "--", "true"},
		{"lock", "/pool", "--duration", "500ms", "--", "true"},
	} {
		code, _, errs := sluice(t, sock, args...)
		if code != 64 {
			t.Errorf("%v: exit %d %q, want 64", args, code, errs)
		}
		oneLine(t, errs)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	holder.wait(t)
}

// TestDevOnTCP: `sluice dev --api HOST:PORT` makes a bearer token and
// prints it; calls with it are served, calls without it refused.
func TestDevOnTCP(t *testing.T) {
	dev := start(t, "dev", "--api", "127.0.0.1:0")
	addr := strings.TrimPrefix(dev.waitLine(t, "API on "), "sluice dev: 3 nodes on 127.0.0.1, API on ")
	token := strings.TrimPrefix(dev.waitLine(t, "API token "), "sluice dev: API token ")
	dev.waitLine(t, "LOCK_READY")
	if len(token) != 32 || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("address %q, token %q", addr, token)
	}
	run := func(env ...string) (int, string) {
		cmd := exec.Command(binary, "lock", "/tcp", "--try", "--", "echo", "held")
		cmd.Env = append(os.Environ(), append([]string{"SLUICE_API=" + addr}, env...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run("SLUICE_API_TOKEN=" + token); code != 0 || out != "held\n" {
		t.Fatalf("with the token: exit %d %q", code, out)
	}
	if code, out := run("SLUICE_API_TOKEN=wrong"); code == 0 || !strings.Contains(out, "unauthorized") {
		t.Fatalf("with a wrong token: exit %d %q", code, out)
	}
	if code, _, errs := sluice(t, "", "dev", "--api", "10.1.2.3:7000"); code != 64 {
		t.Fatalf("dev on a non-loopback API address: exit %d %q, want 64", code, errs)
	}
	if err := dev.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	dev.wait(t)
}
