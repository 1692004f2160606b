package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// badgerLogger routes Badger's log to slog. Badger logs at Info on every
// open and table change and at Debug on every write, so only its warnings
// and errors keep their level; Info goes to Debug and Debug is dropped.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(string, ...any)       {}

func (b badgerLogger) log(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
