// Command sluice-example-frontend is a tiny web frontend behind sluice's
// middleware: every request holds a READ_ONLY lock on the site's name, so
// `sluice drain NAME -- CMD` turns visitors away with a maintenance page
// (503, Retry-After) while CMD runs, once the requests in flight are done.
//
//	sluice dev &                      # an agent on the default socket
//	sluice-example-frontend --name /site
//	sluice drain /site -- sleep 30    # meanwhile: curl -i http://127.0.0.1:8080/
//
// The API's address comes from --api, else $SLUICE_API, else the default
// socket; a TCP address takes its token from $SLUICE_API_TOKEN.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/semaphore/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-example-frontend:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve the site on")
	api := flag.String("api", "", "agent API: Unix socket path or loopback host:port (default $SLUICE_API, else the default socket)")
	name := flag.String("name", "/site", "lock name of the site")
	failOpen := flag.Bool("fail-open", false, "serve without the lock when the agent cannot be asked (default: answer 503)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := client.New(client.Config{API: *api})
	if err != nil {
		return err
	}
	defer c.Close()

	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := client.LeaseFrom(r.Context())
		if l == nil { // served without a lock (--fail-open)
			fmt.Fprintf(w, "hello from %s (no lock: the agent is unavailable)\n", *name)
			return
		}
		fmt.Fprintf(w, "hello from %s (read lock, token %d)\n", *name, l.Token())
	})
	mw := c.Middleware(*name, client.MiddlewareOptions{FailOpen: *failOpen, Logger: log})
	srv := &http.Server{Handler: mw(site), ReadHeaderTimeout: 10 * time.Second}

	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Printf("serving %s on http://%s (lock agent: %s)\n", *name, lis.Addr(), c.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Let requests in flight finish, so that their locks are released.
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
