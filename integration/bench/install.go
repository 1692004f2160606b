package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// errNoServer: a compared system's server binary is missing, and
// installing it did not work.
var errNoServer = errors.New("no server binary")

// findServer is the binary bin of Debian's package pkg: /usr/bin/bin,
// else bin on PATH, else what `apt-get install -y pkg` installs (as root;
// after `apt-get update` when the first try fails, as on a machine that
// never fetched the package lists). Every failure wraps errNoServer.
func findServer(ctx context.Context, bin, pkg string) (string, error) {
	look := func() (string, bool) {
		if p := "/usr/bin/" + bin; isFile(p) {
			return p, true
		}
		p, err := exec.LookPath(bin)
		return p, err == nil
	}
	if p, ok := look(); ok {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: %s is not installed and installing it needs root (apt-get install %s)", errNoServer, bin, pkg)
	}
	logf("%s not found: apt-get install -y %s", bin, pkg)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install -y %s: %w: %s", pkg, err, lastLine(out))
		}
		return nil
	}
	err := install()
	if err != nil {
		logf("%v; apt-get update and once more", err)
		if out, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("%w: apt-get update: %v: %s", errNoServer, uerr, lastLine(out))
		}
		err = install()
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoServer, err)
	}
	if p, ok := look(); ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s installed, but no %s binary found", errNoServer, pkg, bin)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
