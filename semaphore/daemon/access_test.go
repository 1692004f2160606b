package daemon_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/semaphore/daemon"
)

// fakeSystem is a passwd and group database for access tests.
func fakeSystem(cfg daemon.AccessConfig) daemon.AccessConfig {
	users := map[string]uint32{"www-data": 33, "deploy": 1001, "alice": 1002}
	groups := map[string]uint32{"www-data": 33, "deployers": 2001, "admins": 2002}
	self := uint32(999)
	cfg.Self = &self
	cfg.LookupUser = func(name string) (uint32, error) {
		if id, ok := users[name]; ok {
			return id, nil
		}
		return 0, fmt.Errorf("no user %q", name)
	}
	cfg.LookupGroup = func(name string) (uint32, error) {
		if id, ok := groups[name]; ok {
			return id, nil
		}
		return 0, fmt.Errorf("no group %q", name)
	}
	cfg.GroupsOf = func(uid uint32) ([]uint32, error) {
		if uid == 1002 {
			return []uint32{2002}, nil // alice is an admin
		}
		return nil, nil
	}
	if cfg.ReadToken == nil {
		cfg.ReadToken = func(file string) (string, error) { return "tok-" + filepath.Base(file), nil }
	}
	return cfg
}

func TestAccessRoles(t *testing.T) {
	a, err := daemon.NewAccess(fakeSystem(daemon.AccessConfig{
		Roles: []string{"user:deploy=writer:/deploy/", "user:deploy=frontend:/site/", "group:admins=operator",
			"token:/etc/sluice/ci=writer:/ci/"},
		Group: "www-data", Token: "op-token"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who  string
		call *daemon.Caller
		name string
		want daemon.Role
	}{
		{"root", a.Peer(0, 0, 1), "/anything", daemon.RoleOperator},
		{"the agent's user", a.Peer(999, 999, 1), "/anything", daemon.RoleOperator},
		{"a frontend by the socket's group", a.Peer(33, 33, 1), "/site/page", daemon.RoleFrontend},
		{"a writer on its prefix", a.Peer(1001, 1001, 1), "/deploy/x", daemon.RoleWriter},
		{"a frontend on its other prefix", a.Peer(1001, 1001, 1), "/site/x", daemon.RoleFrontend},
		{"nothing off its prefixes", a.Peer(1001, 1001, 1), "/shop/x", daemon.RoleNone},
		{"an operator by a supplementary group", a.Peer(1002, 1002, 1), "/x", daemon.RoleOperator},
		{"nothing for a stranger on a closed socket", a.Peer(4242, 4242, 1), "/site/page", daemon.RoleNone},
	} {
		if got := c.call.Role(c.name); got != c.want {
			t.Errorf("%s: %s on %q, want %s", c.who, got, c.name, c.want)
		}
	}
	ci, ok := a.Bearer("tok-ci")
	if !ok || ci.Role("/ci/build") != daemon.RoleWriter || ci.Role("/site") != daemon.RoleNone {
		t.Errorf("the ci token: %v %v", ci, ok)
	}
	op, ok := a.Bearer("op-token")
	if !ok || !op.Operator() {
		t.Errorf("the --api-token-file token is an operator's: %v %v", op, ok)
	}
	if _, ok := a.Bearer("nobody's"); ok {
		t.Error("an unknown token names a caller")
	}
}

// A group --role names is not made a frontend by --api-group; a socket
// open to every user makes strangers frontends.
func TestAccessDefaults(t *testing.T) {
	a, err := daemon.NewAccess(fakeSystem(daemon.AccessConfig{Roles: []string{"group:www-data=frontend:/site/"},
		Group: "www-data", Open: true}))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Peer(33, 33, 1).Role("/shop"); got != daemon.RoleNone {
		t.Errorf("the named group off its prefix: %s", got)
	}
	if got := a.Peer(4242, 4242, 1).Role("/shop"); got != daemon.RoleFrontend {
		t.Errorf("a stranger on an open socket: %s", got)
	}
}

func TestAccessRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		roles []string
		group string
		want  string
	}{
		{[]string{"user:deploy"}, "", "WHO=ROLE"},
		{[]string{"deploy=writer"}, "", "WHO must be"},
		{[]string{"host:deploy=writer"}, "", "WHO must be"},
		{[]string{"user:=writer"}, "", "WHO must be"},
		{[]string{"user:deploy=admin"}, "", `unknown role "admin"`},
		{[]string{"user:nobody-here=writer"}, "", `no user "nobody-here"`},
		{[]string{"group:nobody-here=writer"}, "", `no group "nobody-here"`},
		{[]string{"user:deploy=operator:/x"}, "", "every name's"},
		{[]string{"user:deploy=writer:/a,b"}, "", "no commas"},
		{[]string{"user:deploy=writer:/site/", "user:deploy=frontend:/site/blog/"}, "", "overlap"},
		{[]string{"user:deploy=writer", "user:deploy=frontend:/x"}, "", "overlap"},
		{nil, "nobody-here", `--api-group "nobody-here"`},
	} {
		_, err := daemon.NewAccess(fakeSystem(daemon.AccessConfig{Roles: c.roles, Group: c.group}))
		if !errors.Is(err, daemon.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an ErrConfig saying %q", c.roles, err, c.want)
		}
	}
	// The same role on overlapping prefixes is fine; so are different
	// roles of different users.
	if _, err := daemon.NewAccess(fakeSystem(daemon.AccessConfig{Roles: []string{"user:deploy=writer:/a/",
		"user:deploy=writer:/a/b/", "user:alice=frontend:/a/"}})); err != nil {
		t.Error(err)
	}
}

// Token files are read by the system's reader: one others may read is
// refused, as an empty one.
func TestAccessTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "s3cret\n", 0o600)
	open := write("open", "s3cret2", 0o644)
	empty := write("empty", " \n", 0o600)
	cfg := func(roles ...string) daemon.AccessConfig {
		c := fakeSystem(daemon.AccessConfig{Roles: roles, Token: "op"})
		c.ReadToken = nil // the system's
		return c
	}
	a, err := daemon.NewAccess(cfg("token:" + good + "=writer:/ci/"))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := a.Bearer("s3cret"); !ok || c.Role("/ci/x") != daemon.RoleWriter {
		t.Errorf("the token of %s: %v %v", good, c, ok)
	}
	for file, want := range map[string]string{open: "open to others", empty: "is empty", dir + "/none": "no such file"} {
		if _, err := daemon.NewAccess(cfg("token:" + file + "=writer")); !errors.Is(err, daemon.ErrConfig) ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("token:%s: %v, want %q", file, err, want)
		}
	}
	same := write("same", "op", 0o600)
	if _, err := daemon.NewAccess(cfg("token:" + same + "=frontend")); err == nil ||
		!strings.Contains(err.Error(), "--api-token-file") {
		t.Errorf("the operator's token given a smaller role: %v", err)
	}
}

// Whatever --role settings say, a role never reaches beyond what one of
// them, the socket's group or the agent's own user grants.
func FuzzAccessConfig(f *testing.F) {
	for _, s := range []string{"user:deploy=writer:/deploy/", "group:www-data=frontend", "token:x=operator",
		"user:deploy=writer:/a,user:deploy=frontend:/b", "user:1001=writer:/", "=", "user:deploy=frontend:\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		roles := strings.Split(spec, ",")
		a, err := daemon.NewAccess(fakeSystem(daemon.AccessConfig{Roles: roles}))
		if err != nil {
			if !errors.Is(err, daemon.ErrConfig) {
				t.Fatalf("%q: %v is not an ErrConfig", spec, err)
			}
			return
		}
		granted := func(role daemon.Role) bool {
			for _, r := range roles {
				if strings.Contains(r, "="+role.String()) {
					return true
				}
			}
			return false
		}
		for _, uid := range []uint32{33, 1001, 1002, 4242} {
			c := a.Peer(uid, uid, 1)
			for _, name := range []string{"/", "/deploy/x", "/a", "/b", "x"} {
				if r := c.Role(name); r != daemon.RoleNone && !granted(r) {
					t.Fatalf("%q: uid %d has %s on %q, which no setting grants", spec, uid, r, name)
				}
			}
		}
	})
}
