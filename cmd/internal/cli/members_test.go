package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core/codes"
	"github.com/sluicehq/sluice/semaphore/api"
)

func TestMembersUsage(t *testing.T) {
	for _, args := range [][]string{
		{"members", "add"},
		{"members", "add", "1", "2"},
		{"members", "remove"},
		{"members", "extra"},
		{"members", "--bogus"},
		{"members", "add", "--api", "/nonexistent/api.sock", ""},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runCapture(t, args...)
			if code != ExitUsage || stdout != "" {
				t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, ExitUsage)
			}
			assertOneCleanLine(t, stderr, "sluice: ")
		})
	}
}

// fakeMembersAgent answers /v1/members on a Unix socket: a two-voter list,
// and for POST the answer named by the id (ok, bad, conflict, notready).
func fakeMembersAgent(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sl") // socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	list := api.MemberList{Node: "1", Cluster: "00c0ffee00c0ffee", Epoch: 4, Members: []api.MemberInfo{
		{Node: "1", Peer: "12D3KooWA", Name: "alpha", Address: "/ip4/10.0.0.1/tcp/7946", Voter: true, Leader: true, Reachable: true},
		{Node: "2", Peer: "12D3KooWB", Name: "beta", Voter: true, Reachable: false},
		{Node: "3", Name: "gamma", Reachable: true},
	}}
	send := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) { send(w, 200, list) })
	mux.HandleFunc("POST /v1/members", func(w http.ResponseWriter, r *http.Request) {
		var b api.MembersBody
		json.NewDecoder(r.Body).Decode(&b)
		switch b.Add + b.Remove {
		case "11":
			send(w, 200, api.MembersChanged{Epoch: 5, Change: "add 3", Members: list})
		case "12":
			send(w, 400, api.ErrorJSON{Error: codes.BadRequest, Message: "node 2 is not a member"})
		case "13":
			send(w, 409, api.ErrorJSON{Error: codes.Conflict, Message: "another change\nis under way"})
		case "14":
			send(w, 503, api.ErrorJSON{Error: "not_ready", Message: "no valid view yet"})
		case "15":
			send(w, 504, api.ErrorJSON{Error: codes.ChangeTimedOut, Message: "context deadline exceeded"})
		}
	})
	srv := &http.Server{Handler: mux}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return sock
}

func TestMembersCommands(t *testing.T) {
	sock := fakeMembersAgent(t)
	code, stdout, stderr := runCapture(t, "members", "--api", sock)
	if code != ExitOK || stderr != "" {
		t.Fatalf("members: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NODE") ||
		strings.Join(strings.Fields(lines[1]), " ") != "1 12D3KooWA alpha /ip4/10.0.0.1/tcp/7946 yes yes yes -" ||
		strings.Join(strings.Fields(lines[3]), " ") != "3 - gamma - no yes -" ||
		lines[4] != "cluster 00c0ffee00c0ffee, view epoch 4, 2 voters" {
		t.Errorf("members:\n%s", stdout)
	}
	code, stdout, _ = runCapture(t, "members", "--api", sock, "--json")
	var got api.MemberList
	if code != ExitOK || json.Unmarshal([]byte(stdout), &got) != nil || len(got.Members) != 3 || got.Epoch != 4 {
		t.Errorf("members --json: exit %d:\n%s", code, stdout)
	}

	code, stdout, stderr = runCapture(t, "members", "add", "11", "--api", sock)
	if code != ExitOK || stderr != "" || stdout != "added 11: view epoch 5, members: 1 (alpha), 2 (beta)\n" {
		t.Errorf("add: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		line string
	}{
		{[]string{"remove", "12"}, ExitFailure, "sluice: members remove: node 2 is not a member\n"},
		{[]string{"add", "13"}, ExitFailure, "sluice: members add: another change is under way\n"},
		{[]string{"add", "15"}, ExitFailure, "sluice: members add: not confirmed in time"},
		{[]string{"add", "14"}, ExitUnavailable, "sluice: members add: "},
		{[]string{"add", "nonsense"}, ExitUsage, "sluice: members add: \"nonsense\" is neither a peer id"},
	} {
		code, stdout, stderr := runCapture(t, append(append([]string{"members"}, tc.args...), "--api", sock)...)
		if code != tc.code || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q; want %d", tc.args, code, stdout, tc.code)
		}
		assertOneCleanLine(t, stderr, tc.line)
	}
	// No agent at all.
	code, _, stderr = runCapture(t, "members", "--api", filepath.Join(t.TempDir(), "none.sock"))
	if code != ExitUnavailable {
		t.Errorf("members without an agent: exit %d (%q), want %d", code, stderr, ExitUnavailable)
	}
}

// The summary says the cluster's codec and which voters hold it back.
func TestMembersSummarySaysTheClusterCodec(t *testing.T) {
	l := api.MemberList{Cluster: "00c0ffee00c0ffee", Epoch: 7, Codec: 4, Level: 3, Members: []api.MemberInfo{
		{Node: "1", Name: "web-1", Voter: true, Codec: 4, Offers: 3, Version: "0.9.0"},
		{Node: "2", Name: "web-2", Voter: true, Codec: 4, Offers: 4, Version: "0.9.0"},
		{Node: "3", Voter: true, Codec: 4, Offers: 3, Version: "0.9.0"},
		{Node: "4", Name: "web-4", Codec: 4, Offers: 3, Version: "0.9.0"}, // not a voter: holds nothing
	}}
	var b strings.Builder
	printMembers(&b, l)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if want := "cluster 00c0ffee00c0ffee, view epoch 7, 3 voters, all read codec 4, cluster codec 3 (held by web-1, 3)"; lines[len(lines)-1] != want {
		t.Errorf("summary %q, want %q", lines[len(lines)-1], want)
	}
	l.Level = 4
	for i := range l.Members {
		l.Members[i].Offers = 4
	}
	b.Reset()
	printMembers(&b, l)
	if !strings.HasSuffix(b.String(), ", all read codec 4, cluster codec 4\n") {
		t.Errorf("summary without a hold:\n%s", b.String())
	}
}
