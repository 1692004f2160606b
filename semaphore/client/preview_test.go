package client_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/client"
)

// TestMiddlewarePreview: while a drain holds the name, requests with its
// preview token pass the maintenance page (the link's query sets the
// cookie and redirects to the URL without it); no other request does,
// nor the token while its drain still waits, nor after it, under a
// later drain.
func TestMiddlewarePreview(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	const name = "/preview"
	var seen atomic.Pointer[client.Lease] // the page views' lease, lent to them
	srv := httptest.NewServer(c.Middleware(name, client.MiddlewareOptions{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			seen.Store(client.LeaseFrom(r.Context()))
			io.WriteString(w, "site preview="+r.Header.Get(client.PreviewHeader))
		})))
	defer srv.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type answer struct {
		status         int
		body, location string
		cookie         *http.Cookie
	}
	ask := func(query, cookie string, header ...string) answer {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/cart"+query, nil)
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: client.PreviewCookie, Value: cookie})
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, body: string(b), location: resp.Header.Get("Location")}
		for _, ck := range resp.Cookies() {
			if ck.Name == client.PreviewCookie {
				a.cookie = ck
			}
		}
		return a
	}
	token, hash, err := client.NewPreviewToken()
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := client.NewPreviewToken()

	// Open: everyone is served, and a visitor cannot claim to be a preview.
	if a := ask("", token, client.PreviewHeader, "1"); a.status != 200 || a.body != "site preview=" {
		t.Fatalf("open site: %+v", a)
	}

	// The drain waits for a reader: its token passes nothing yet.
	reader, err := c.Acquire(ctx, name, semaphore.ReadOnly, client.Options{Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		l   *client.Lease
		err error
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := c.Acquire(ctx, name, semaphore.ReadWritePriority, client.Options{Timeout: time.Minute, Preview: hash})
		granted <- grant{l, err}
	}()
	for _, l := range []*client.Lease{reader, seen.Load()} {
		select { // the readers hear that a writer waits
		case <-l.Draining():
		case <-ctx.Done():
			t.Fatal("the drain never waited")
		}
	}
	if a := ask("", token); a.status != http.StatusServiceUnavailable {
		t.Fatalf("the token of a drain that waits: %+v", a)
	}
	if err := reader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-granted
	if g.err != nil {
		t.Fatal(g.err)
	}

	// The drain holds: the link sets the cookie, the cookie passes.
	a := ask("?"+client.PreviewQuery+"="+token+"&item=7", "")
	if a.status != http.StatusSeeOther || a.location != "/cart?item=7" || a.cookie == nil || a.cookie.Value != token || !a.cookie.HttpOnly {
		t.Fatalf("the preview link: %+v", a)
	}
	if a := ask("", token); a.status != 200 || a.body != "site preview=1" {
		t.Fatalf("a preview: %+v", a)
	}
	for _, bad := range []string{other, token + "x", token[:len(token)-1], strings.Repeat("a", 300)} {
		if a := ask("", bad); a.status != http.StatusServiceUnavailable {
			t.Fatalf("a wrong token %.20q: %+v", bad, a)
		}
		if a := ask("?"+client.PreviewQuery+"="+bad, ""); a.status != http.StatusServiceUnavailable || a.cookie != nil {
			t.Fatalf("a wrong token's link %.20q: %+v", bad, a)
		}
	}
	if a := ask("", ""); a.status != http.StatusServiceUnavailable {
		t.Fatalf("a visitor during the drain: %+v", a)
	}
	if err := g.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A later drain: the old token is refused.
	_, hash2, _ := client.NewPreviewToken()
	w2, err := c.Acquire(ctx, name, semaphore.ReadWritePriority, client.Options{Timeout: time.Minute, Preview: hash2})
	if err != nil {
		t.Fatal(err)
	}
	if a := ask("", token); a.status != http.StatusServiceUnavailable {
		t.Fatalf("a replayed token under a later drain: %+v", a)
	}
	if err := w2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// wsServer is a websocket handler behind the middleware: it answers the
// upgrade, sends first, and waits for its request's end.
func wsServer(t *testing.T, c *client.Client, name string, first []byte) (*httptest.Server, <-chan *client.Lease, <-chan error) {
	entered, after := make(chan *client.Lease, 1), make(chan error, 1)
	srv := httptest.NewServer(c.Middleware(name, client.MiddlewareOptions{})(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				entered <- nil
				return
			}
			defer conn.Close()
			rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			rw.Write(first)
			rw.Flush()
			entered <- client.LeaseFrom(r.Context())
			<-r.Context().Done()
			_, err = conn.Write([]byte{0x81, 1, 'x'})
			after <- err
		})))
	t.Cleanup(srv.Close)
	return srv, entered, after
}

// dialWebsocket asks srv for a websocket and reads the 101's head.
func dialWebsocket(t *testing.T, srv *httptest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: site\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the upgrade: %v %v", resp, err)
	}
	return conn, br
}

// TestMiddlewareWebsocketGetsCloseFrame: a websocket whose lease is
// revoked (a drain's grace is over) gets a close frame, 1001 going away,
// after the frames already sent, and the handler's later frames are
// refused.
func TestMiddlewareWebsocketGetsCloseFrame(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	hello := []byte{0x81, 5, 'h', 'e', 'l', 'l', 'o'}
	srv, entered, after := wsServer(t, c, "/ws", hello)
	_, br := dialWebsocket(t, srv)
	if <-entered == nil {
		t.Fatal("no lease")
	}
	if _, err := c.RevokeReaders(ctx, "/ws", "test"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br) // to the close
	want := append(append([]byte{}, hello...), 0x88, 13)
	want = binary.BigEndian.AppendUint16(want, 1001)
	want = append(want, "maintenance"...)
	if !bytes.Equal(rest, want) {
		t.Fatalf("the visitor read % x, want % x", rest, want)
	}
	if err := <-after; err == nil {
		t.Fatal("a frame written after the loss went out")
	}
}

// TestMiddlewareWebsocketLostMidFrame: a loss in the middle of a frame
// closes the connection without a close frame, which would be read as
// the frame's payload.
func TestMiddlewareWebsocketLostMidFrame(t *testing.T) {
	_, c := startAgent(t)
	ctx := ctxT(t)
	half := []byte{0x82, 126, 0x01, 0x00, 1, 2, 3} // 256 bytes announced, 3 sent
	srv, entered, _ := wsServer(t, c, "/ws-half", half)
	_, br := dialWebsocket(t, srv)
	if <-entered == nil {
		t.Fatal("no lease")
	}
	if _, err := c.RevokeReaders(ctx, "/ws-half", "test"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	if !bytes.Equal(rest, half) {
		t.Fatalf("the visitor read % x, want only % x", rest, half)
	}
}
