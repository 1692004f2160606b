//go:build linux

package integration

import (
	"bytes"
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

// TestRolesOfUnixUsers runs an agent as root, its socket in a group both
// test users are in (mode 0660), with --role naming the deploy user a
// writer on /deploy/. The frontend user, a member of the socket's group
// and nothing more, takes page views and is refused everything else with
// 77 and "forbidden", through the CLI (the Go client's compact calls and
// HTTP) and curl; nothing its refusals touched changes. The deploy user
// drains its prefix and not another; root may do everything. Root only:
// it makes two Unix users and a group, and deletes them after.
func TestRolesOfUnixUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it makes two Unix users and runs commands as them")
	}
	for _, tool := range []string{"useradd", "userdel", "groupadd", "groupdel", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	tag := runTag()
	group, fe, deploy := "slg"+tag, "slfe"+tag, "sldp"+tag
	mustRun(t, "groupadd", group)
	cleanup(t, func() { _ = exec.Command("groupdel", group).Run() })
	ids := map[string]*syscall.Credential{}
	for _, name := range []string{fe, deploy} {
		mustRun(t, "useradd", "--no-create-home", "--gid", group, "--shell", "/bin/sh", name)
		cleanup(t, func() { _ = exec.Command("userdel", name).Run() })
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		ids[name] = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
	}
	// The users reach the binary and the socket's directory.
	dir := shortDir(t)
	for _, d := range []string{dir, filepath.Dir(binary)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "run", "api.sock")
	agent := start(t, "agent", "--in-memory", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", sock, "--api-mode", "0660",
		"--api-group", group, "--role", "user:"+deploy+"=writer:/deploy/", "--log-level", "warn")
	agent.waitLine(t, "API on")
	waitReady(t, unixClient(sock))

	// as runs the sluice binary, or curl, as who ("" for root).
	as := func(who string, prog string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(prog, args...)
		cmd.Env = []string{"SLUICE_API=" + sock, "PATH=/usr/bin:/bin", "HOME=/"}
		dieWithTest(cmd)
		if who != "" {
			cmd.SysProcAttr.Credential = ids[who]
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return code, out.String()
		case <-time.After(bound):
			_ = cmd.Process.Kill()
			t.Fatalf("%s %v as %q did not end in %v: %s", prog, args, who, bound, out.String())
			return 0, ""
		}
	}
	cli := func(who string, args ...string) (int, string) { return as(who, binary, args...) }
	curl := func(who, method, path, body string) string {
		t.Helper()
		_, out := as(who, "curl", "-s", "--unix-socket", sock, "-X", method, "-d", body, "-w", " %{http_code}",
			"http://sluice"+path)
		return out
	}
	refused := func(what string, code int, out string) {
		t.Helper()
		if code != 77 || !strings.Contains(out, "forbidden") {
			t.Errorf("%s: exit %d, want 77 and forbidden: %s", what, code, out)
		}
	}
	allowed := func(what string, code int, out string) {
		t.Helper()
		if code != 0 {
			t.Errorf("%s: exit %d: %s", what, code, out)
		}
	}

	// Root holds /site/held; every refusal below leaves it held.
	holder := startProc(t, exec.Command(binary, "lock", "/site/held", "--api", sock, "--", "sh", "-c",
		"echo holding; exec sleep 60"))
	holder.waitLine(t, "holding")

	// The frontend: page views, status, its own table; nothing else.
	code, out := cli(fe, "lock", "/site/page", "--mode", "read-only", "--", "true")
	allowed("the frontend's page view", code, out)
	code, out = cli(fe, "status")
	allowed("the frontend's status", code, out)
	code, out = cli(fe, "lock", "/site/page", "--try", "--", "true")
	refused("the frontend's exclusive lock", code, out)
	code, out = cli(fe, "drain", "/site", "--", "true")
	refused("the frontend's drain", code, out)
	code, out = cli(fe, "unlock", "--force", "/site/held")
	refused("the frontend's force-unlock", code, out)
	code, out = cli(fe, "members", "remove", "9")
	refused("the frontend's members remove", code, out)
	code, out = cli(fe, "members", "vouch")
	refused("the frontend's vouch", code, out)
	if got := curl(fe, "POST", "/v1/force-unlock", `{"name":"/site/held"}`); !strings.HasSuffix(got, " 403") ||
		!strings.Contains(got, `"forbidden"`) {
		t.Errorf("the frontend's force-unlock with curl: %s", got)
	}
	if got := curl(fe, "POST", "/v1/acquire", `{"name":"/site/c","mode":"read-only","try":true}`); !strings.HasSuffix(got, " 200") {
		t.Errorf("the frontend's page view with curl: %s", got)
	}

	// The deploy user: a drain of its prefix, not of another.
	code, out = cli(deploy, "drain", "/deploy/app", "--", "true")
	allowed("the deploy user's drain of /deploy/", code, out)
	code, out = cli(deploy, "drain", "/site", "--", "true")
	refused("the deploy user's drain of /site", code, out)
	code, out = cli(deploy, "lock", "/site/page", "--mode", "read-only", "--", "true")
	allowed("the deploy user's page view (the socket's group)", code, out)

	// Nothing the refusals touched changed: root's holder still holds,
	// and root's force-unlock ends it (its command is stopped: 76).
	code, out = cli("", "locks", "/site/held")
	if code != 0 || !strings.Contains(out, "/site/held") {
		t.Fatalf("root's table after the refusals: exit %d: %s", code, out)
	}
	code, out = cli("", "unlock", "--force", "/site/held")
	allowed("root's force-unlock", code, out)
	if code := holder.wait(t); code != 76 {
		t.Errorf("the force-unlocked holder exited %d, want 76", code)
	}
	code, out = cli("", "drain", "/site", "--", "true")
	allowed("root's drain", code, out)

	// The agent's log names who was refused, by uid and pid.
	fuid := strconv.FormatUint(uint64(ids[fe].Uid), 10)
	agent.waitLine(t, "uid="+fuid)
}

func mustRun(t *testing.T, prog string, args ...string) {
	t.Helper()
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", prog, args, err, out)
	}
}
