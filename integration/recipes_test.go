package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The manual's recipes for `sluice proxy`, run as written: the blocks are
// read from the operator's manual, with the test's ports, paths and socket put in.

// debianTool is the path of a program from Debian's packages, "" when it
// is not installed.
func debianTool(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if p := filepath.Join(dir, n); isExecutable(p) {
				return p
			}
		}
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// phpFPM is Debian's php-fpm (php-fpm8.2 on bookworm).
func phpFPM() string {
	if p := debianTool("php-fpm"); p != "" {
		return p
	}
	matches, _ := filepath.Glob("/usr/sbin/php-fpm*")
	for _, m := range matches {
		if isExecutable(m) {
			return m
		}
	}
	return ""
}

// readmeBlockOf is the fenced block of lang whose first line is first.
func readmeBlockOf(t *testing.T, lang, first string) string {
	t.Helper()
	for _, part := range strings.Split(docs(t), "\n```"+lang+"\n")[1:] {
		block, _, _ := strings.Cut(part, "\n```\n")
		if strings.HasPrefix(block, first+"\n") {
			return block + "\n"
		}
	}
	t.Fatalf("README has no %s block that begins %q", lang, first)
	return ""
}

// proxyArgs are the arguments of the manual's `sluice proxy` line in the
// sh block that begins with comment, with the test's addresses.
func proxyArgs(t *testing.T, comment, listen, upstream, sock string) []string {
	t.Helper()
	block := readmeBlockOf(t, "sh", comment)
	for _, line := range strings.Split(block, "\n") {
		if args, ok := strings.CutPrefix(line, "sluice proxy "); ok {
			args = strings.Replace(args, "0.0.0.0:80", listen, 1)
			args = strings.Replace(args, "http://127.0.0.1:8080", upstream, 1)
			return append(strings.Fields(args), "--api", sock)
		}
	}
	t.Fatalf("no sluice proxy line in the manual's block %q", comment)
	return nil
}

// nginxServer runs Debian's nginx with server blocks (the http context's
// content) under dir, on its own files only.
func nginxServer(t *testing.T, nginx, dir, servers string) {
	t.Helper()
	for _, sub := range []string{"tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile("/etc/nginx/fastcgi_params"); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "fastcgi_params"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;\n" // the workers read the test's files
	}
	conf := fmt.Sprintf(`%sdaemon off;
master_process on;
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/logs/error.log;
events { worker_connections 512; }
http {
    access_log off;
    client_body_temp_path %[2]s/tmp/body;
    proxy_temp_path %[2]s/tmp/proxy;
    fastcgi_temp_path %[2]s/tmp/fastcgi;
    uwsgi_temp_path %[2]s/tmp/uwsgi;
    scgi_temp_path %[2]s/tmp/scgi;
%s
}
`, user, dir, servers)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startProc(t, exec.Command(nginx, "-p", dir+"/", "-c", path, "-e", filepath.Join(dir, "logs", "error.log")))
}

// waitServed polls url until it answers 200 with want in its body: a
// server of another program coming up.
func waitServed(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(string(b), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %q: %v", url, want, err)
		}
		time.Sleep(50 * time.Millisecond) // another program's start, bounded
	}
}

// TestRecipeInFrontOfNginxPHP: the manual's nginx server block with
// PHP-FPM (Debian's, when installed; a Go upstream otherwise) behind its
// `sluice proxy` line: pages pass; a drain with a reason gives visitors
// the maintenance page and its preview link the PHP site; after it the
// site is back.
func TestRecipeInFrontOfNginxPHP(t *testing.T) {
	sock := startDev(t)
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nginx, fpm := debianTool("nginx"), phpFPM()
	upstream, want := "", ""
	if nginx == "" || fpm == "" {
		t.Log("no nginx and php-fpm (Debian: apt-get install nginx php-fpm): the recipe runs in front of a Go upstream")
		site := newUpstreamSite(t)
		upstream, want = site.srv.URL, "hello from upstream"
	} else {
		root := filepath.Join(dir, "www")
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "index.php"), []byte(`<?php echo "hello from PHP ", PHP_VERSION, "\n";`), 0o644); err != nil {
			t.Fatal(err)
		}
		fpmSock := filepath.Join(dir, "php.sock")
		pool := fmt.Sprintf("[global]\npid = %[1]s/fpm.pid\nerror_log = %[1]s/fpm.log\ndaemonize = no\n[www]\nlisten = %[2]s\nlisten.mode = 0666\npm = static\npm.max_children = 4\n", dir, fpmSock)
		fpmArgs := []string{"-F", "-y", filepath.Join(dir, "fpm.conf")}
		if os.Geteuid() == 0 {
			pool += "user = root\ngroup = root\n"
			fpmArgs = append(fpmArgs, "-R")
		}
		if err := os.WriteFile(filepath.Join(dir, "fpm.conf"), []byte(pool), 0o644); err != nil {
			t.Fatal(err)
		}
		startProc(t, exec.Command(fpm, fpmArgs...))
		port := freePort(t)
		server := readmeBlockOf(t, "nginx", "# /etc/nginx/sites-enabled/shop")
		server = strings.Replace(server, "listen 127.0.0.1:8080;", fmt.Sprintf("listen 127.0.0.1:%d;", port), 1)
		server = strings.Replace(server, "root /var/www/shop;", "root "+root+";", 1)
		server = regexp.MustCompile(`unix:/run/php/php[0-9.]*-fpm\.sock`).ReplaceAllString(server, "unix:"+fpmSock)
		nginxServer(t, nginx, filepath.Join(dir, "nginx"), server)
		upstream, want = fmt.Sprintf("http://127.0.0.1:%d", port), "hello from PHP"
		waitServed(t, upstream+"/", want)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxy := start(t, append([]string{"proxy"}, proxyArgs(t, "# in front of nginx", addr, upstream, sock)...)...)
	proxy.waitLine(t, "proxying")
	site := "http://" + addr + "/"
	if code, body := getPage(t, http.DefaultClient, site); code != 200 || !strings.Contains(body, want) {
		t.Fatalf("through the proxy: %d %q", code, body)
	}

	done := filepath.Join(dir, "done")
	drain := start(t, "drain", "https://shop.example/", "--api", sock, "--reason", "Upgrading the shop", "--eta", "10m", "--",
		"sh", "-c", `echo cmd-$((1+1))-began; i=0; until [ -e "$1" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done`, "sh", done)
	line := drain.waitLine(t, "preview it before visitors return: ")
	drain.waitLine(t, "cmd-2-began")
	if code, body := getPage(t, http.DefaultClient, site); code != 503 || !strings.Contains(body, "Upgrading the shop") {
		t.Errorf("a visitor during the drain: %d %q", code, body)
	}
	link, err := url.Parse(line[strings.LastIndex(line, " ")+1:])
	if err != nil {
		t.Fatal(err)
	}
	link.Scheme, link.Host = "http", addr // the test's proxy stands for https://shop.example/
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: bound}
	for range 2 {
		if code, body := getPage(t, browser, link.String()); code != 200 || !strings.Contains(body, want) {
			t.Errorf("the preview link: %d %q", code, body)
		}
		link.RawQuery = "" // then the cookie alone
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	if code, body := getPage(t, http.DefaultClient, site); code != 200 || !strings.Contains(body, want) {
		t.Errorf("after the drain: %d %q", code, body)
	}
}

func getPage(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRecipeBehindALoadBalancer: the manual's balancer (Debian's nginx
// when installed, else Go's reverse proxy taking turns) in front of two
// frontends running its `sluice proxy` line: visitors reach the site
// through both, with their address first in X-Forwarded-For, and one
// drain turns them away on both.
func TestRecipeBehindALoadBalancer(t *testing.T) {
	sock := startDev(t)
	site := newUpstreamSite(t)
	var fronts []string
	for range 2 {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		p := start(t, append([]string{"proxy"}, proxyArgs(t, "# on each frontend, behind the balancer", addr, site.srv.URL, sock)...)...)
		p.waitLine(t, "proxying")
		fronts = append(fronts, addr)
	}
	lb := ""
	if nginx := debianTool("nginx"); nginx != "" {
		dir := shortDir(t)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		port := freePort(t)
		conf := readmeBlockOf(t, "nginx", "# the balancer: /etc/nginx/conf.d/shop.conf")
		conf = strings.Replace(conf, "server 10.0.0.11:80;", "server "+fronts[0]+";", 1)
		conf = strings.Replace(conf, "server 10.0.0.12:80;", "server "+fronts[1]+";", 1)
		conf = strings.Replace(conf, "listen 80;", fmt.Sprintf("listen 127.0.0.1:%d;", port), 1)
		nginxServer(t, nginx, dir, conf)
		lb = fmt.Sprintf("http://127.0.0.1:%d/", port)
		waitServed(t, lb, "hello from upstream")
	} else {
		t.Log("no nginx (Debian: apt-get install nginx): the balancer is Go's reverse proxy")
		var turn atomic.Int64
		balancer := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: fronts[turn.Add(1)%2]})
			pr.Out.Host = pr.In.Host
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		}}
		srv := &http.Server{Handler: balancer, ReadHeaderTimeout: 10 * time.Second}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(lis)
		t.Cleanup(func() { srv.Close() })
		lb = "http://" + lis.Addr().String() + "/"
	}
	visit := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", lb, nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.7") // the visitor, as a CDN before the balancer says
		resp, err := (&http.Client{Timeout: bound}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 4 {
		if code, body := visit(); code != 200 || !strings.Contains(body, "hello from upstream") {
			t.Fatalf("through the balancer: %d %q", code, body)
		}
	}
	site.mu.Lock()
	forwarded := site.forwarded
	site.mu.Unlock()
	if !strings.HasPrefix(forwarded, "203.0.113.7, 127.0.0.1") {
		t.Errorf("the site saw X-Forwarded-For %q, want the visitor's first", forwarded)
	}
	done := filepath.Join(shortDir(t), "done")
	drain := start(t, "drain", "https://shop.example/", "--api", sock, "--", "sh", "-c",
		`echo cmd-$((1+1))-began; i=0; until [ -e "$1" ]; do i=$((i+1)); [ $i -lt 1200 ] || exit 9; sleep 0.05; done`, "sh", done)
	drain.waitLine(t, "cmd-2-began")
	for range 4 { // both frontends, in turn
		if code, _ := visit(); code != 503 {
			t.Errorf("through the balancer during the drain: %d, want 503", code)
		}
	}
	if err := os.WriteFile(done, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := drain.wait(t); code != 0 {
		t.Fatalf("drain exited %d", code)
	}
	if code, _ := visit(); code != 200 {
		t.Errorf("after the drain: %d", code)
	}
}

// TestRecipeSystemdUnit: the manual's unit for `sluice proxy` passes
// systemd-analyze verify (where systemd is installed), and its ExecStart
// line, run with the test's binary, socket and ports, serves the site.
func TestRecipeSystemdUnit(t *testing.T) {
	sock := startDev(t)
	site := newUpstreamSite(t)
	unit := readmeBlockOf(t, "ini", "# /etc/systemd/system/sluice-proxy.service")
	exec1 := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(unit)
	if exec1 == nil || exec1[1] != "/usr/local/bin/sluice" {
		t.Fatalf("no ExecStart=/usr/local/bin/sluice in the unit:\n%s", unit)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := exec1[2]
	args = strings.Replace(args, "/run/sluice/api.sock", sock, 1)
	args = strings.Replace(args, "0.0.0.0:80", addr, 1)
	args = strings.Replace(args, "http://127.0.0.1:8080", site.srv.URL, 1)
	if analyze := debianTool("systemd-analyze"); analyze != "" {
		dir := shortDir(t)
		path := filepath.Join(dir, "sluice-proxy.service")
		local := strings.Replace(unit, "ExecStart=/usr/local/bin/sluice", "ExecStart="+binary, 1)
		local = strings.Replace(local, "User=www-data\n", "", 1) // the test machine may have no www-data
		if err := os.WriteFile(path, []byte(local), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
		// A unit it names (sluice.service) that this machine lacks is
		// not the unit's fault; anything else is.
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.Contains(line, "sluice.service") {
				t.Errorf("systemd-analyze verify: %v\n%s", err, out)
				break
			}
		}
	} else {
		t.Log("no systemd-analyze: the unit's ExecStart is run, not verified")
	}
	p := start(t, strings.Fields(args)...)
	p.waitLine(t, "proxying")
	if code, body := getPage(t, http.DefaultClient, "http://"+addr+"/"); code != 200 || !strings.Contains(body, "hello from upstream") {
		t.Fatalf("the unit's proxy: %d %q", code, body)
	}
}
