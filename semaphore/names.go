package semaphore

import (
	"fmt"
	"strings"
)

// MaxDepth is the most levels a nested name has: its root and the path
// segments below it.
const MaxDepth = 32

// defaultPorts are the ports a URL's root leaves out.
var defaultPorts = map[string]string{"http": ":80", "https": ":443"}

// NamePath is the chain of names a nested lock on name covers, from its
// root to name itself (its canonical form, the last), each canonical: a lock on the last one
// takes intention tickets on the others, so that a holder of a name and
// holders of its parents and descendants exclude each other by the modes'
// rules. The rules, which operators can predict from a URL:
//
//   - A URL (scheme://host/path) has the site as its root: scheme and host
//     in lower case, the default port (80 for http, 443 for https) left
//     out, and a slash: "https://shop.example/". Each path segment adds a
//     level: "https://shop.example/shop", then ".../shop/cart".
//   - Another name has its segments split by "/": "/site/shop/cart" is
//     "/site", "/site/shop", "/site/shop/cart"; "db/users/42" is "db",
//     "db/users", "db/users/42". A name without "/" has no parents.
//   - A trailing slash is dropped ("/shop/" is "/shop"), except the site
//     root's. In a URL, the query string belongs to the last level
//     ("https://s.example/cart?id=3" is below ".../cart"), as it reached
//     the server, and a fragment is dropped, since no server sees it;
//     elsewhere "?" and "#" are characters like others.
//   - Percent-encoding is made canonical: escapes of unreserved characters
//     (letters, digits, "-", ".", "_", "~") are decoded, the others' hex
//     digits put in upper case; "%2F" stays an escape, not a separator.
//
// An empty segment ("a//b"), a "." or ".." segment (escaped or not), a
// malformed escape, a URL without a host, more than MaxDepth levels or a
// name CheckName refuses: ErrInvalid, naming what is wrong.
func NamePath(name string) ([]string, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if path, ok := canonicalPath(name); ok {
		return path, nil
	}
	return buildPath(name)
}

// canonicalPath is NamePath of a name that is in canonical form already,
// as a page view's name usually is (a frontend's URLs, or the name a
// lease carries): every level is a prefix of name, so no string is built
// (a third of a nested page view's name work was building them). ok is
// false for anything buildPath would change or refuse: an escape, a query
// or fragment, a scheme or host not in lower-case ASCII, a default port,
// a URL without the slash after its host, an empty, "." or ".." segment,
// a trailing slash, the name "/", too many levels.
func canonicalPath(name string) (path []string, ok bool) {
	if name == "/" || strings.IndexByte(name, '%') >= 0 || strings.IndexByte(name, '?') >= 0 || strings.IndexByte(name, '#') >= 0 {
		return nil, false
	}
	start := 0 // where the first segment begins
	if scheme, after, isURL := strings.Cut(name, "://"); isURL && isScheme(scheme) {
		host, _, slash := strings.Cut(after, "/")
		if !slash || host == "" || !lowerASCII(scheme) || !lowerASCII(host) {
			return nil, false
		}
		if strings.HasSuffix(host, ":80") || strings.HasSuffix(host, ":443") {
			return nil, false // maybe a default port (defaultPorts)
		}
		start = len(scheme) + len("://") + len(host) + len("/")
		path = make([]string, 1, 1+strings.Count(name[start:], "/")+1)
		path[0] = name[:start]
	} else if strings.HasPrefix(name, "/") {
		start = 1
	}
	if start == len(name) {
		return path, path != nil
	}
	if strings.HasSuffix(name, "/") {
		return nil, false
	}
	if path == nil {
		path = make([]string, 0, strings.Count(name[start:], "/")+1)
	}
	for i := start; ; {
		end := len(name)
		if j := strings.IndexByte(name[i:], '/'); j >= 0 {
			end = i + j
		}
		if seg := name[i:end]; seg == "" || seg == "." || seg == ".." {
			return nil, false
		}
		if path = append(path, name[:end]); len(path) > MaxDepth {
			return nil, false
		}
		if end == len(name) {
			return path, true
		}
		i = end + 1
	}
}

// lowerASCII reports whether s has only ASCII bytes and no upper-case
// letter: strings.ToLower leaves it as it is.
func lowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

// buildPath is NamePath for any name CheckName lets through.
func buildPath(name string) ([]string, error) {
	bad := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("%w: name %q: %s", ErrInvalid, name, fmt.Sprintf(format, args...))
	}
	rest, query, root := name, "", ""
	if scheme, after, ok := strings.Cut(rest, "://"); ok && isScheme(scheme) {
		// The fragment never reaches a server; the query belongs to the
		// last level. Outside URLs, "?" and "#" are characters as others.
		after, _, _ = strings.Cut(after, "#")
		if i := strings.IndexByte(after, '?'); i >= 0 {
			q, err := canonicalEscapes(after[i:])
			if err != nil {
				return bad("%v", err)
			}
			after, query = after[:i], q
		}
		host, path, _ := strings.Cut(after, "/")
		if host == "" {
			return bad("a URL without a host")
		}
		scheme, host = strings.ToLower(scheme), strings.ToLower(host)
		if port := defaultPorts[scheme]; port != "" {
			host = strings.TrimSuffix(host, port)
		}
		root, rest = scheme+"://"+host+"/", path
	} else if strings.HasPrefix(rest, "/") {
		rest, root = rest[1:], "/"
	}
	rest = strings.TrimSuffix(rest, "/")
	var segs []string
	if rest != "" {
		segs = strings.Split(rest, "/")
	}
	var path []string
	if root != "" && (root != "/" || len(segs) == 0) {
		path = append(path, root) // "/" alone is a root only as a name of its own
	}
	at := root
	for i, s := range segs {
		switch c, err := canonicalEscapes(s); {
		case err != nil:
			return bad("%v", err)
		case c == "":
			return bad("empty segment %d", i+1)
		case c == "." || c == "..":
			return bad("segment %q: names have no relative parts", s)
		default:
			if at != "" && !strings.HasSuffix(at, "/") {
				at += "/"
			}
			at += c
			path = append(path, at)
		}
	}
	if len(path) == 0 {
		return bad("no segment")
	}
	if query != "" {
		path = append(path, path[len(path)-1]+query)
	}
	if len(path) > MaxDepth {
		return bad("%d levels, at most %d", len(path), MaxDepth)
	}
	return path, nil
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, "+", "-" or ".".
func isScheme(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isLetter(c) && !isDigit(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// canonicalEscapes decodes the escapes of unreserved characters in s and
// puts the others' hex digits in upper case.
func canonicalEscapes(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("escape %q cut short", s[i:])
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("malformed escape %q", s[i:i+3])
		}
		c := byte(hi<<4 | lo)
		if isLetter(c) || isDigit(c) || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case c|0x20 >= 'a' && c|0x20 <= 'f':
		return int(c|0x20-'a') + 10
	}
	return -1
}
