package semaphore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/semaphore"
)

func TestNamePath(t *testing.T) {
	for _, c := range []struct {
		name string
		want []string
	}{
		{"https://shop.example/", []string{"https://shop.example/"}},
		{"https://shop.example", []string{"https://shop.example/"}},
		{"HTTPS://Shop.Example:443/shop/cart/", []string{"https://shop.example/", "https://shop.example/shop", "https://shop.example/shop/cart"}},
		{"http://shop.example:8080/a", []string{"http://shop.example:8080/", "http://shop.example:8080/a"}},
		{"https://s.example/cart?id=%7e3#top", []string{"https://s.example/", "https://s.example/cart", "https://s.example/cart?id=~3"}},
		{"https://s.example/%7Euser/a%2fb/%c3%a9", []string{"https://s.example/", "https://s.example/~user", "https://s.example/~user/a%2Fb",
			"https://s.example/~user/a%2Fb/%C3%A9"}},
		{"/site/shop/cart", []string{"/site", "/site/shop", "/site/shop/cart"}},
		{"/", []string{"/"}},
		{"db/users/42", []string{"db", "db/users", "db/users/42"}},
		{"nightly-backup", []string{"nightly-backup"}},
		{"job#3?x", []string{"job#3?x"}}, // not a URL: plain characters
	} {
		got, err := semaphore.NamePath(c.name)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("NamePath(%q) = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

func TestNamePathRefuses(t *testing.T) {
	for _, c := range []struct{ name, why string }{
		{"", "empty name"},
		{"/site//shop", "empty segment 2"},
		{"https://s.example/a/../b", `segment ".."`},
		{"https://s.example/a/%2e%2E/b", `segment "%2e%2E"`},
		{"/site/./x", `segment "."`},
		{"https:///path", "without a host"},
		{"/a/%zz", "malformed escape"},
		{"/a/b%4", "cut short"},
		{"https://s.example/?q=%", "cut short"},
		{strings.Repeat("/a", semaphore.MaxDepth+1), "33 levels, at most 32"},
		{strings.Repeat("/a", 10000), "over"}, // over the name's byte limit first
		{"/a\n/b", "control character"},
	} {
		got, err := semaphore.NamePath(c.name)
		if !errors.Is(err, semaphore.ErrInvalid) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("NamePath(%.40q) = %q, %v; want ErrInvalid saying %q", c.name, got, err, c.why)
		}
	}
}

// Every name's path ends with its own canonical form, whose path is the
// same: canonical forms are fixed points, and parents are prefixes.
func FuzzNamePath(f *testing.F) {
	for _, s := range []string{"https://shop.example/shop/cart?x=1", "/site/a", "db/x", "HTTP://A:80/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		path, err := semaphore.NamePath(name)
		if err != nil {
			if !errors.Is(err, semaphore.ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		again, err := semaphore.NamePath(path[len(path)-1])
		if err != nil || !slices.Equal(again, path) {
			t.Fatalf("%q: path %q, its last's path %q, %v", name, path, again, err)
		}
		for i := 1; i < len(path); i++ {
			if !strings.HasPrefix(path[i], path[i-1]) {
				t.Fatalf("%q: %q is not below %q", name, path[i], path[i-1])
			}
		}
	})
}
