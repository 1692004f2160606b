package semaphore

import (
	"slices"
	"strings"
	"testing"
)

// canonicalPath answers only for names whose levels buildPath would make
// the same, and it does answer for canonical names (the page views' fast
// case).
func TestCanonicalPath(t *testing.T) {
	for _, c := range []struct {
		name string
		fast bool
	}{
		{"https://shop.example/", true},
		{"https://shop.example/section/page", true},
		{"http://shop.example:8080/a", true},
		{"/site/shop/cart", true},
		{"db/users/42", true},
		{"nightly-backup", true},
		{"/", false},
		{"https://shop.example", false},       // the root's slash is added
		{"HTTPS://shop.example/a", false},     // scheme to lower case
		{"https://Shop.example/a", false},     // host to lower case
		{"https://shop.example:443/a", false}, // default port dropped
		{"https://shop.example/a/", false},    // trailing slash dropped
		{"/site/", false},
		{"https://s.example/cart?id=3", false}, // the query is a level
		{"https://s.example/a#top", false},     // the fragment is dropped
		{"/a/%7e", false},                      // escapes made canonical
		{"/site//shop", false},                 // refused
		{"/a/../b", false},
		{"/a/./b", false},
		{"https://ex\u00e9mple.org/a", false}, // non-ASCII host: ToLower's business
		{strings.Repeat("/a", MaxDepth+1), false},
		{strings.Repeat("/a", MaxDepth), true},
	} {
		path, fast := canonicalPath(c.name)
		if fast != c.fast {
			t.Errorf("canonicalPath(%.40q) answered: %v, want %v", c.name, fast, c.fast)
		}
		if !fast {
			continue
		}
		want, err := buildPath(c.name)
		if err != nil || !slices.Equal(path, want) {
			t.Errorf("canonicalPath(%.40q) = %q; buildPath says %q, %v", c.name, path, want, err)
		}
	}
}

// Whatever name it answers for, canonicalPath says what buildPath does.
func FuzzCanonicalPath(f *testing.F) {
	for _, s := range []string{"https://shop.example/shop/cart", "/site/a", "db/x", "HTTP://A:80/%41", "https://h/", "a//b", "x://y/z/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if CheckName(name) != nil {
			return
		}
		path, fast := canonicalPath(name)
		if !fast {
			return
		}
		want, err := buildPath(name)
		if err != nil || !slices.Equal(path, want) {
			t.Fatalf("canonicalPath(%q) = %q; buildPath says %q, %v", name, path, want, err)
		}
	})
}

func BenchmarkNamePath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NamePath("https://bench-durable-r1-w4n.example/section/page"); err != nil {
			b.Fatal(err)
		}
	}
}
