package daemon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/core/wire"
	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/daemon"
)

// TestValidate: the edge's one check refuses each rule broken, with the
// field in its message, and lets the limits themselves through.
func TestValidate(t *testing.T) {
	ok := daemon.Request{Name: "/a", Mode: semaphore.ReadOnly, Timeout: time.Second, Duration: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(*daemon.Request)
		want string
	}{
		"empty name":       {func(r *daemon.Request) { r.Name = "" }, "empty name"},
		"long name":        {func(r *daemon.Request) { r.Name = strings.Repeat("n", wire.MaxNameLen+1) }, "name of"},
		"unknown mode":     {func(r *daemon.Request) { r.Mode = 77 }, "mode"},
		"negative timeout": {func(r *daemon.Request) { r.Timeout = -time.Second }, "timeout"},
		"zero duration":    {func(r *daemon.Request) { r.Duration = 0 }, "duration must be positive"},
		"absurd duration":  {func(r *daemon.Request) { r.Duration = 100000 * time.Hour }, "duration"},
		"negative grace":   {func(r *daemon.Request) { r.Grace = -1 }, "grace"},
		"negative quiet":   {func(r *daemon.Request) { r.Quiet = -1 }, "quiet"},
		"negative limit":   {func(r *daemon.Request) { r.Limit = -2 }, "reader limit"},
		"absurd limit":     {func(r *daemon.Request) { r.Limit = core.DefaultMaxWaiters + 1 }, "reader limit"},
	} {
		r := ok
		tc.edit(&r)
		if err := r.Validate(); !errors.Is(err, codes.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tc.want)
		}
	}
	for _, edit := range []func(*daemon.Request){
		func(r *daemon.Request) { r.Limit, r.Quiet = 3, 5*time.Second },
		func(r *daemon.Request) { r.Limit = core.DefaultMaxWaiters },
		func(r *daemon.Request) { r.Timeout, r.Try = 0, true },
	} {
		r := ok
		edit(&r)
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// TestParseAcquire: the body's defaults, and what only reading refuses.
func TestParseAcquire(t *testing.T) {
	r, err := daemon.ParseAcquire(api.AcquireBody{Name: "/a"})
	if err != nil || r.Mode != semaphore.Exclusive || r.Timeout != 30*time.Second || r.Duration != time.Minute || r.Validate() != nil {
		t.Fatalf("defaults: %+v %v", r, err)
	}
	for _, b := range []api.AcquireBody{{Name: "/a", Mode: "sideways"}, {Name: "/a", Quiet: "soon"}} {
		if _, err := daemon.ParseAcquire(b); !errors.Is(err, codes.ErrInvalid) {
			t.Errorf("%+v: %v", b, err)
		}
	}
}
