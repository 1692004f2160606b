package daemon

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
)

// Who may do what on the local API: the agent's --role settings.
//
// A caller is known by what the kernel says of a Unix socket's peer
// (SO_PEERCRED: uid, gid and pid, read once per connection, so a kept-alive
// connection's calls cost no system call more), or by the bearer token a
// TCP caller sends; never by what a request says of itself. Its roles, each
// on the names that start with a prefix, say what it may do:
//   - frontend: READ_ONLY locks (limited readers too), and status, the
//     members list, the lock table and metrics;
//   - writer: the exclusive modes too (sluice lock, sluice drain);
//   - operator: everything, on every name: force-unlock, membership
//     changes, vouching for a store.
//
// A lease is released, renewed and watched by the caller that took it (the
// same uid, or the same token) or by an operator.

// Role is what a caller may do on a name.
type Role uint8

const (
	// RoleNone may do nothing.
	RoleNone Role = iota
	// RoleFrontend takes READ_ONLY locks and reads the status.
	RoleFrontend
	// RoleWriter takes every mode's locks too.
	RoleWriter
	// RoleOperator may do everything, on every name.
	RoleOperator
)

var roleNames = [...]string{"none", "frontend", "writer", "operator"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames[1:] {
		if s == n {
			return Role(i + 1), nil
		}
	}
	return RoleNone, fmt.Errorf("unknown role %q (frontend, writer or operator)", s)
}

// modeRole is the role a lock of mode needs.
func modeRole(mode semaphore.Mode) Role {
	if mode == semaphore.ReadOnly {
		return RoleFrontend
	}
	return RoleWriter
}

// Grant is a role on the names that start with Prefix ("": every name).
type Grant struct {
	Role   Role
	Prefix string
}

func (g Grant) String() string {
	if g.Prefix == "" {
		return g.Role.String() + " on every name"
	}
	return fmt.Sprintf("%s on %q", g.Role, g.Prefix+"*")
}

// Caller is who calls the API.
type Caller struct {
	// UID, GID and PID are the kernel's word on a Unix socket's peer
	// (Cred); a TCP caller has none, and Token names its token's file.
	UID, GID uint32
	PID      int32
	Cred     bool
	Token    string
	grants   []Grant
	// command is the peer's command line, read from /proc once, on the
	// first audited call of the connection: a deploy's lock loop audits
	// every lock and release, and reading /proc each time cost a tenth
	// of the agent's CPU and a system call on every answer's path. The
	// kernel's credentials are the connection's too, from its connect.
	command struct {
		once sync.Once
		line string
	}
}

// commandLine is the peer's command line (see commandLine), read once.
func (c *Caller) commandLine() string {
	c.command.once.Do(func() { c.command.line = commandLine(c.PID) })
	return c.command.line
}

// Role is the caller's highest role on name.
func (c *Caller) Role(name string) Role {
	best := RoleNone
	for _, g := range c.grants {
		if strings.HasPrefix(name, g.Prefix) {
			best = max(best, g.Role)
		}
	}
	return best
}

// top is the caller's highest role on any name.
func (c *Caller) top() Role {
	best := RoleNone
	for _, g := range c.grants {
		best = max(best, g.Role)
	}
	return best
}

// Operator reports whether the caller may do everything.
func (c *Caller) Operator() bool { return c.Role("") == RoleOperator }

// same reports whether c and o are one caller, for a lease's owner: the
// same uid, or the same token.
func (c *Caller) same(o *Caller) bool {
	return c.Cred && o.Cred && c.UID == o.UID || !c.Cred && !o.Cred && c.Token == o.Token
}

// String names the caller by numbers: it runs on the node's loop, which
// must not read /etc/passwd (describe does, off the loop).
func (c *Caller) String() string {
	switch {
	case !c.Cred && c.Token == "":
		return "a caller the kernel did not name"
	case !c.Cred:
		return "the holder of token " + c.Token
	}
	return fmt.Sprintf("uid %d pid %d", c.UID, c.PID)
}

// describe is String with the user's name, for the audit.
func (c *Caller) describe() string {
	if !c.Cred {
		return c.String()
	}
	if name := userName(c.UID); name != "" {
		return fmt.Sprintf("uid %d (%s) pid %d", c.UID, name, c.PID)
	}
	return c.String()
}

// userNames caches the names of uids: a lookup may be a cgo call, which
// takes an OS thread, and many callers at once must not take many.
var userNames struct {
	sync.Mutex
	names map[uint32]string
}

// userName is uid's user name ("" when the system has none), looked up
// once, one lookup at a time.
func userName(uid uint32) string {
	userNames.Lock()
	defer userNames.Unlock()
	if name, ok := userNames.names[uid]; ok {
		return name
	}
	name := ""
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		name = u.Username
	}
	if userNames.names == nil || len(userNames.names) > 4096 {
		userNames.names = map[uint32]string{}
	}
	userNames.names[uid] = name
	return name
}

// roles lists the caller's grants, for a refusal.
func (c *Caller) roles() string {
	if len(c.grants) == 0 {
		return "none"
	}
	parts := make([]string, len(c.grants))
	for i, g := range c.grants {
		parts[i] = g.String()
	}
	return strings.Join(parts, ", ")
}

// Forbidden is the refusal of what c may not do: what it asked, on which
// name, and the role it would need.
func (c *Caller) forbidden(what, name string, need Role) error {
	on := ""
	if name != "" {
		on = fmt.Sprintf(" on %q", name)
	}
	return fmt.Errorf("%w: %s may not %s%s: that needs the %s role on a prefix of the name (it has: %s)",
		codes.ErrForbidden, c, what, on, need, c.roles())
}

// may is nil if c has need on name, else the refusal.
func (c *Caller) may(what, name string, need Role) error {
	if c.Role(name) >= need {
		return nil
	}
	return c.forbidden(what, name, need)
}

type callerKey struct{}

// WithCaller is ctx carrying c: the Node's calls made with it check c's
// roles (a lease's owner among them). A context without one is an
// in-process caller's, which may do everything.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (*Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	return c, ok
}

// AccessConfig says who may do what (see Access).
type AccessConfig struct {
	// Roles are the --role settings: WHO=ROLE or WHO=ROLE:PREFIX, WHO
	// being user:NAME, group:NAME (a name or a number) or token:FILE (a
	// bearer token for a TCP API address, in a file only its owner may
	// read). A prefix limits the role to the names that start with it;
	// none is every name. An operator's role is every name's.
	Roles []string
	// Group is the API socket's group (--api-group): its members not
	// named by Roles are frontends on every name.
	Group string
	// Open: the socket is open to every local user (--api-mode 0666):
	// callers nothing names are frontends on every name. Otherwise they
	// may do nothing (only the socket's user and group can connect).
	Open bool
	// Token is the --api-token-file token: an operator's.
	Token string
	// Self is the agent's uid (an operator, as root is); zero value: the
	// process's.
	Self *uint32
	// LookupUser, LookupGroup and ReadToken default to the system's
	// (os/user, and a file only its owner may read); tests replace them.
	LookupUser  func(name string) (uint32, error)
	LookupGroup func(name string) (uint32, error)
	ReadToken   func(file string) (string, error)
	// GroupsOf lists a uid's supplementary groups (default: os/user's
	// answer, kept for a minute).
	GroupsOf func(uid uint32) ([]uint32, error)
}

// Access resolves callers' roles. Its zero value is not used: an agent
// without one (in-process tests) lets every caller do everything.
type Access struct {
	users, groups map[uint32][]Grant
	tokens        map[string]tokenGrants // by the token itself
	self          uint32
	fallback      []Grant
	groupsOf      func(uid uint32) ([]uint32, error)
}

type tokenGrants struct {
	file   string
	grants []Grant
}

// roleSpec is one parsed --role setting.
type roleSpec struct {
	kind, who string
	grant     Grant
}

// parseRoleSpec reads WHO=ROLE[:PREFIX].
func parseRoleSpec(s string) (roleSpec, error) {
	var r roleSpec
	who, what, ok := strings.Cut(s, "=")
	if !ok {
		return r, fmt.Errorf("%w: --role %q: want WHO=ROLE or WHO=ROLE:PREFIX (WHO: user:NAME, group:NAME or token:FILE)", ErrConfig, s)
	}
	kind, name, ok := strings.Cut(who, ":")
	if !ok || name == "" || kind != "user" && kind != "group" && kind != "token" {
		return r, fmt.Errorf("%w: --role %q: WHO must be user:NAME, group:NAME or token:FILE", ErrConfig, s)
	}
	roleName, prefix, _ := strings.Cut(what, ":")
	role, err := ParseRole(roleName)
	if err != nil {
		return r, fmt.Errorf("%w: --role %q: %w", ErrConfig, s, err)
	}
	switch {
	case role == RoleOperator && prefix != "":
		return r, fmt.Errorf("%w: --role %q: an operator's role is every name's; give no prefix", ErrConfig, s)
	case strings.ContainsAny(prefix, ",\n\x00"):
		return r, fmt.Errorf("%w: --role %q: a prefix has no commas or control characters", ErrConfig, s)
	case len(prefix) > wire.MaxNameLen:
		return r, fmt.Errorf("%w: --role %q: a prefix is at most %d bytes", ErrConfig, s, wire.MaxNameLen)
	}
	return roleSpec{kind: kind, who: name, grant: Grant{Role: role, Prefix: prefix}}, nil
}

// NewAccess checks cfg and resolves its users, groups and tokens: an
// unknown role, user or group, overlapping prefixes with different roles
// for one WHO, or a token file others may read is an ErrConfig.
func NewAccess(cfg AccessConfig) (*Access, error) {
	if cfg.LookupUser == nil {
		cfg.LookupUser = lookupUser
	}
	if cfg.LookupGroup == nil {
		cfg.LookupGroup = lookupGroup
	}
	if cfg.ReadToken == nil {
		cfg.ReadToken = readTokenFile
	}
	a := &Access{users: map[uint32][]Grant{}, groups: map[uint32][]Grant{}, tokens: map[string]tokenGrants{},
		groupsOf: cfg.GroupsOf}
	if cfg.Self != nil {
		a.self = *cfg.Self
	} else {
		a.self = uint32(os.Getuid())
	}
	if a.groupsOf == nil {
		a.groupsOf = cachedGroups(time.Minute)
	}
	add := func(list []Grant, g Grant, who string) ([]Grant, error) {
		for _, o := range list {
			overlap := strings.HasPrefix(g.Prefix, o.Prefix) || strings.HasPrefix(o.Prefix, g.Prefix)
			if overlap && o.Role != g.Role {
				return nil, fmt.Errorf("%w: --role %s: %s and %s overlap; give one role per prefix", ErrConfig, who, o, g)
			}
		}
		return append(list, g), nil
	}
	for _, s := range cfg.Roles {
		r, err := parseRoleSpec(s)
		if err != nil {
			return nil, err
		}
		who := r.kind + ":" + r.who
		switch r.kind {
		case "user":
			uid, err := cfg.LookupUser(r.who)
			if err != nil {
				return nil, fmt.Errorf("%w: --role %q: %w", ErrConfig, s, err)
			}
			if a.users[uid], err = add(a.users[uid], r.grant, who); err != nil {
				return nil, err
			}
		case "group":
			gid, err := cfg.LookupGroup(r.who)
			if err != nil {
				return nil, fmt.Errorf("%w: --role %q: %w", ErrConfig, s, err)
			}
			if a.groups[gid], err = add(a.groups[gid], r.grant, who); err != nil {
				return nil, err
			}
		case "token":
			tok, err := cfg.ReadToken(r.who)
			if err != nil {
				return nil, fmt.Errorf("%w: --role %q: %w", ErrConfig, s, err)
			}
			if tok == cfg.Token {
				return nil, fmt.Errorf("%w: --role %q: that is the --api-token-file token, an operator's", ErrConfig, s)
			}
			t := a.tokens[tok]
			if t.file != "" && t.file != r.who {
				return nil, fmt.Errorf("%w: --role %q: the same token as %s", ErrConfig, s, t.file)
			}
			t.file = r.who
			if t.grants, err = add(t.grants, r.grant, who); err != nil {
				return nil, err
			}
			a.tokens[tok] = t
		}
	}
	if cfg.Token != "" {
		a.tokens[cfg.Token] = tokenGrants{file: "--api-token-file", grants: []Grant{{Role: RoleOperator}}}
	}
	if cfg.Group != "" {
		gid, err := cfg.LookupGroup(cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("%w: --api-group %q: %w", ErrConfig, cfg.Group, err)
		}
		if _, named := a.groups[gid]; !named {
			a.groups[gid] = []Grant{{Role: RoleFrontend}}
		}
	}
	if cfg.Open {
		a.fallback = []Grant{{Role: RoleFrontend}}
	}
	return a, nil
}

// Peer is the caller the kernel's credentials name, with its roles: the
// agent's own user and root are operators; a user's grants come with its
// groups' (primary and supplementary); a caller nothing names gets the
// fallback (frontend on every name on an open socket, else nothing).
func (a *Access) Peer(uid, gid uint32, pid int32) *Caller {
	c := &Caller{UID: uid, GID: gid, PID: pid, Cred: true}
	if uid == 0 || uid == a.self {
		c.grants = []Grant{{Role: RoleOperator}}
		return c
	}
	c.grants = append(c.grants, a.users[uid]...)
	c.grants = append(c.grants, a.groups[gid]...)
	if len(a.groups) > 0 {
		// Only when a group is named: the lookup reads /etc/group.
		if gids, err := a.groupsOf(uid); err == nil {
			for _, g := range gids {
				if g != gid {
					c.grants = append(c.grants, a.groups[g]...)
				}
			}
		}
	}
	if len(c.grants) == 0 {
		c.grants = a.fallback
	}
	return c
}

// Bearer is the caller a bearer token names, or false when none does.
func (a *Access) Bearer(token string) (*Caller, bool) {
	t, ok := a.tokens[token]
	if !ok {
		return nil, false
	}
	return &Caller{Token: t.file, grants: t.grants}, true
}

// HasTokens reports whether any token opens the API.
func (a *Access) HasTokens() bool { return len(a.tokens) > 0 }

// lookupUser is a user's uid: a number is taken as it is (a container
// may have no passwd entry for it).
func lookupUser(name string) (uint32, error) {
	if id, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(id), nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("no user %q", name)
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(id), err
}

// lookupGroup is a group's gid, as lookupUser.
func lookupGroup(name string) (uint32, error) {
	if id, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(id), nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("no group %q", name)
	}
	id, err := strconv.ParseUint(g.Gid, 10, 32)
	return uint32(id), err
}

// readTokenFile reads a token from a file only its owner may read.
func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s is open to others (mode %04o); chmod 600 it", path, st.Mode().Perm())
	}
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// cachedGroups is os/user's supplementary groups of a uid, each kept for
// ttl: a page view's connection must not read /etc/group.
func cachedGroups(ttl time.Duration) func(uint32) ([]uint32, error) {
	type entry struct {
		gids []uint32
		err  error
		at   time.Time
	}
	var mu sync.Mutex
	cache := map[uint32]entry{}
	return func(uid uint32) ([]uint32, error) {
		// One lookup at a time, under the lock: a lookup may be a cgo
		// call, and a crowd of new connections must not start one each.
		mu.Lock()
		defer mu.Unlock()
		e, ok := cache[uid]
		if ok && time.Since(e.at) < ttl {
			return e.gids, e.err
		}
		e = entry{at: time.Now()}
		u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
		var ids []string
		if err == nil {
			ids, err = u.GroupIds()
		}
		e.err = err
		for _, s := range ids {
			if g, perr := strconv.ParseUint(s, 10, 32); perr == nil {
				e.gids = append(e.gids, uint32(g))
			}
		}
		slices.Sort(e.gids)
		if len(cache) > 4096 {
			clear(cache)
		}
		cache[uid] = e
		return e.gids, e.err
	}
}
