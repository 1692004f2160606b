package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/semaphore"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// priorityOf reads the priority out of an election id ("14|random|addr|pid|name").
func priorityOf(id string) string {
	p, _, _ := strings.Cut(id, "|")
	if p == "15" {
		return "off"
	}
	return strings.TrimLeft(p, "0")
}

func nameOf(id string) string {
	if i := strings.LastIndex(id, "|"); i >= 0 {
		return id[i+1:]
	}
	return id
}

func newStatusCmd() *cobra.Command {
	var (
		cf      clientFlags
		asJSON  bool
		waitFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's view: epoch, leaders, members, LOCK_READY or NO_LOCK",
		Long: "Show the view (epoch, leaders), the members with their priority and\n" +
			"whether they answer, and LOCK_READY or NO_LOCK with the reason. With\n" +
			"--wait-ready D, wait up to D for LOCK_READY (and for the agent's socket,\n" +
			"while it starts); exit 69 if it does not come.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if waitFor < 0 {
				return usageErrorf("--wait-ready %v is negative", waitFor)
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor+10*time.Second)
			defer cancel()
			deadline := time.Now().Add(waitFor)
			var st api.StatusJSON
			for {
				st, err = c.Status(ctx)
				// An agent still starting has no socket yet: wait for it too.
				unreachable := errors.Is(err, semaphore.ErrUnavailable) && time.Now().Before(deadline)
				if err != nil && !unreachable {
					return apiError("status", err)
				}
				if err == nil && (st.Ready || !time.Now().Before(deadline)) {
					break
				}
				select { // polling the agent's state until the deadline
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, st); err != nil {
					return err
				}
			} else {
				printStatus(out, st)
			}
			if waitFor > 0 && !st.Ready {
				return &exitError{code: ExitUnavailable, msg: fmt.Sprintf("status: not ready after %v: %s", waitFor, st.Reason)}
			}
			return nil
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&waitFor, "wait-ready", 0, "wait up to this long for LOCK_READY (exit 69 if not)")
	return cmd
}

func printStatus(w io.Writer, st api.StatusJSON) {
	state := st.State
	if st.Reason != "" {
		state += " (" + st.Reason + ")"
	}
	fmt.Fprintf(w, "state:   %s\n", state)
	fmt.Fprintf(w, "node:    %s", st.Node)
	if st.Name != "" {
		fmt.Fprintf(w, " %s", tableName(st.Name))
	}
	if st.Leader {
		fmt.Fprintf(w, " (leader, serving=%v)", st.Serving)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "epoch:   %d", st.View.Epoch)
	if st.View.PrevEpoch > 0 {
		fmt.Fprintf(w, " (after %d)", st.View.PrevEpoch)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "leaders: %v\n", st.View.Leaders)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAME\tPRIORITY\tREACHABLE\tLEADER")
	for _, m := range st.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Node, nameOf(m.ID), priorityOf(m.ID), yesNo(m.Alive), yesNo(m.Leader))
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newLocksCmd() *cobra.Command {
	var (
		cf        clientFlags
		asJSON    bool
		olderThan time.Duration
		watch     bool
	)
	cmd := &cobra.Command{
		Use:   "locks [PREFIX]",
		Short: "List locks: holders and waiters per name",
		Long: "List the names starting with PREFIX in the cluster's lock table, from\n" +
			"any agent: it asks the leaders for theirs and merges a quorum of them.\n" +
			"Each request in bakery order, and this agent's own requests.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("locks: at most one PREFIX, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if olderThan < 0 {
				return usageErrorf("locks: --older-than must not be negative, got %s", olderThan)
			}
			show := func() error {
				return cf.withAgent(callTimeout, func(ctx context.Context, c *client.Client) error {
					tab, err := c.Locks(ctx, prefix)
					if err != nil {
						return apiError("locks", err)
					}
					tab = olderLocks(tab, time.Now().Add(-olderThan))
					return printAnswer(cmd.OutOrStdout(), asJSON, tab, printLocks)
				})
			}
			if !watch {
				return show()
			}
			// Again every 2 s until Ctrl-C; a terminal is cleared first.
			ctx, stop := signalContext(cmd)
			defer stop()
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
			for shown := false; ; shown = true {
				if isTerminal(cmd.OutOrStdout()) {
					fmt.Fprint(cmd.OutOrStdout(), "\033[H\033[2J")
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", time.Now().Format(time.TimeOnly))
				if err := show(); err != nil {
					if !shown || ctx.Err() != nil {
						return err // a bad question, or no agent at all
					}
					// An agent restarting under the watch: say so, go on.
					fmt.Fprintf(cmd.OutOrStdout(), "(%v)\n", err)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "only requests the leaders have known for at least this long (a lock held for long, a writer stuck)")
	cmd.Flags().BoolVar(&watch, "watch", false, "show the table again every 2 s, until Ctrl-C")
	return cmd
}

// olderLocks keeps the entries of t known since before cutoff, and the
// names that still have one.
func olderLocks(t api.Table, cutoff time.Time) api.Table {
	locks := []api.Lock{}
	for _, l := range t.Locks {
		var es []api.Entry
		for _, e := range l.Entries {
			if !e.Since.After(cutoff) {
				es = append(es, e)
			}
		}
		if len(es) > 0 {
			l.Entries = es
			locks = append(locks, l)
		}
	}
	t.Locks = locks
	var own []api.OwnRequest
	for _, r := range t.Requests {
		if !r.Since.After(cutoff) {
			own = append(own, r)
		}
	}
	t.Requests = own
	return t
}

// tableName is a lock's name as a table cell: as it is when it is all
// printable without blanks or quotes, else quoted (an agent refuses names
// with control characters, but a table may come from an older one).
func tableName(name string) string {
	plain := name != "" && strings.IndexFunc(name, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"'
	}) < 0
	if plain && utf8.ValidString(name) {
		return name
	}
	return strconv.Quote(name)
}

// nodeLabel is how a table names a node: by its name when known (quoted
// when not plain), else by its id.
func nodeLabel(name, id string) string {
	if name == "" {
		return id
	}
	return tableName(name)
}

// printLocks prints tab as a table, each entry a row. Names that nest
// (semaphore.NamePath) are shown as a tree: each under its nearest parent
// level in the table, two spaces further in per level, siblings in order,
// and this agent's own requests under their names. A table of names
// without parents keeps its rows in the table's order and this agent's
// other requests after them.
func printLocks(w io.Writer, tab api.Table) { printLocksAt(w, tab, time.Now()) }

// printLocksAt is printLocks with the AGE column counted up to now.
func printLocksAt(w io.Writer, tab api.Table, now time.Time) {
	own := map[string]api.OwnRequest{}
	owners := map[string]string{}
	for _, r := range tab.Requests {
		own[r.Request], owners[r.Request] = r, r.Owner
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tTOKEN\tREQUEST\tNODE\tSTATE\tSINCE\tAGE\tEXPIRES\tOWNER")
	age := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() }
	// A time of today shows as a clock; another day's (a drain kept for
	// 720h expires in a month) with its date, so that it is not taken for
	// a time of today.
	clock := func(t time.Time) string {
		y, m, d := t.Date()
		if ny, nm, nd := now.In(t.Location()).Date(); ny == y && nm == m && nd == d {
			return t.Format(time.TimeOnly)
		}
		return t.Format(time.DateTime)
	}
	sharedHere := map[string]bool{} // names with this node's shared read ticket in the table
	for _, l := range tab.Locks {
		for _, e := range l.Entries {
			if e.Readers != nil && e.Node == tab.Node && e.Mode == semaphore.ReadOnly.String() {
				sharedHere[l.Name] = true
			}
		}
	}
	// A group is a name's rows, all but the NAME cell.
	type group struct {
		name string
		path []string // NamePath's levels, or the name alone when it refuses it
		rows []string
	}
	var groups []*group
	byName := map[string]*group{}
	groupOf := func(name string) *group {
		if g := byName[name]; g != nil {
			return g
		}
		g := &group{name: name, path: []string{name}}
		if path, err := semaphore.NamePath(name); err == nil {
			g.path = path
		}
		groups = append(groups, g)
		byName[name] = g
		return g
	}
	for _, l := range tab.Locks {
		g := groupOf(l.Name)
		for _, e := range l.Entries {
			state, since, expires := "waiting", clock(e.Since), "-"
			switch {
			case e.Ticket == 0:
				state = "choosing"
			case e.Holder:
				// The leader forgets it by Until; the lease ends before.
				state, expires = "holder", "<"+clock(e.Until)
			}
			if r, ok := own[e.Request]; ok { // this agent's own request: exact
				since, state = clock(r.Since), r.Phase
				if !r.Expires.IsZero() {
					expires = clock(r.Expires)
				}
				delete(own, e.Request)
			}
			owner := cmp.Or(e.Owner, owners[e.Request], "-")
			switch {
			case e.Readers == nil:
			case e.Mode == semaphore.IntentShared.String(): // a node's shared ticket for the page views below
				owner = fmt.Sprintf("shared intent ticket, readers below: %d", *e.Readers)
				if listed, more := readersBy(e.ReadersBelow); len(listed) > 0 {
					if more != "" {
						listed = append(listed, more)
					}
					owner += " (" + strings.Join(listed, ", ") + ")"
				}
			default: // a node's shared read ticket
				owner = fmt.Sprintf("shared read ticket, readers on it: %d", *e.Readers)
			}
			if e.Reason != "" {
				owner += fmt.Sprintf(" — %q", e.Reason)
			}
			if !e.ETA.IsZero() {
				owner += " — expected done at " + clock(e.ETA)
			}
			if !e.GraceEnd.IsZero() {
				owner += " — readers' grace ends at " + clock(e.GraceEnd)
			}
			if e.Revoked > 0 {
				owner += fmt.Sprintf(" — readers cut: %d", e.Revoked)
			}
			if e.Preview != "" {
				owner += " — preview link given"
			}
			g.rows = append(g.rows, fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", e.Mode, e.Ticket, e.Request, nodeLabel(e.NodeName, e.Node), state, since,
				age(e.Since), expires, owner))
		}
	}
	type ownRow struct{ name, row string }
	var rest []ownRow // this node's requests not in a table it holds
	for _, r := range tab.Requests {
		if _, left := own[r.Request]; !left || r.Phase == "held-shared" && sharedHere[r.Name] {
			continue // shown, or one of the readers its shared read ticket's row counts
		}
		expires := "-"
		if !r.Expires.IsZero() {
			expires = clock(r.Expires)
		}
		owner := cmp.Or(r.Owner, "-")
		if r.PageViews != nil {
			owner += fmt.Sprintf(" — lent to page views: %d", *r.PageViews)
		}
		rest = append(rest, ownRow{r.Name, fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.Mode, r.Ticket, r.Request,
			nodeLabel(tab.NodeName, tab.Node), r.Phase, clock(r.Since), age(r.Since), expires, owner)})
	}
	nested := func(name string) bool {
		path, err := semaphore.NamePath(name)
		return err == nil && len(path) > 1
	}
	tree := slices.ContainsFunc(groups, func(g *group) bool { return len(g.path) > 1 }) ||
		slices.ContainsFunc(rest, func(r ownRow) bool { return nested(r.name) })
	if !tree {
		for _, g := range groups {
			for _, row := range g.rows {
				fmt.Fprintf(tw, "%s\t%s\n", tableName(g.name), row)
			}
		}
		for _, r := range rest {
			fmt.Fprintf(tw, "%s\t%s\n", tableName(r.name), r.row)
		}
	} else {
		for _, r := range rest {
			g := groupOf(r.name)
			g.rows = append(g.rows, r.row)
		}
		groups = slices.DeleteFunc(groups, func(g *group) bool { return len(g.rows) == 0 })
		slices.SortStableFunc(groups, func(a, b *group) int { return cmp.Or(slices.Compare(a.path, b.path), cmp.Compare(a.name, b.name)) })
		shown := map[string]bool{}
		for _, g := range groups {
			shown[g.path[len(g.path)-1]] = true
		}
		for _, g := range groups {
			depth := 0
			for _, level := range g.path[:len(g.path)-1] {
				if shown[level] {
					depth++
				}
			}
			for _, row := range g.rows {
				fmt.Fprintf(tw, "%s%s\t%s\n", strings.Repeat("  ", depth), tableName(g.name), row)
			}
		}
	}
	_ = tw.Flush()
	switch {
	case tab.Note != "":
		fmt.Fprintf(w, "(no cluster-wide view: %s; this agent's own table is shown)\n", tab.Note)
	case !tab.Leader && len(tab.MergedFrom) == 0:
		fmt.Fprintln(w, "(this agent is not a leader: only its own clients' requests are shown)")
	}
}

// readersBy lists readers by name, the most first ("/site/shop 5",
// "/site/blog 2"), names with none left out; past the first few, more
// sums up the others ("3 more on 2 other names").
func readersBy(counts map[string]int) (listed []string, more string) {
	var names []string
	for name, n := range counts {
		if n > 0 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	const most = 4 // a progress line stays one line on a terminal
	for _, name := range names[:min(len(names), most)] {
		listed = append(listed, fmt.Sprintf("%s %d", tableName(name), counts[name]))
	}
	switch others := names[min(len(names), most):]; len(others) {
	case 0:
	case 1:
		more = fmt.Sprintf("%d more on 1 other name", counts[others[0]])
	default:
		n := 0
		for _, name := range others {
			n += counts[name]
		}
		more = fmt.Sprintf("%d more on %d other names", n, len(others))
	}
	return listed, more
}

func newUnlockCmd() *cobra.Command {
	var (
		cf     clientFlags
		force  bool
		token  uint64
		lease  string
		all    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "unlock --force NAME [--token T | --lease ID | --all]",
		Short: "Release someone else's lock (operator)",
		Long: "Tell the leaders to drop a holder's ticket of NAME: the one with\n" +
			"--token T, or --lease ID; with neither, NAME's holders in the cluster's\n" +
			"table (the next waiter then gets it); --all also drops the waiters\n" +
			"(each exits 75: not obtained), before the holders, so none of them is\n" +
			"granted on the way. The leaders tell the holder's agent at once (a\n" +
			"`sluice lock` holder sends its command SIGTERM); its fencing token is\n" +
			"what protects the resource until the holder stops. Returns once a\n" +
			"quorum of the leaders dropped the ticket; a lease no leader of that\n" +
			"quorum has fails with unknown_lease. The agent logs who did it.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("unlock: one NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !force {
				return usageErrorf("unlock: --force is required: this releases a lock its holder still believes it has")
			}
			name := args[0]
			if err := semaphore.CheckName(name); err != nil {
				return usageErrorf("unlock: %s", plainError(err))
			}
			if (token != 0) && (lease != "") || all && (token != 0 || lease != "") {
				return usageErrorf("unlock: give one of --token, --lease and --all")
			}
			return cf.withAgent(callTimeout, func(ctx context.Context, c *client.Client) error {
				released, err := release(ctx, c, name, token, lease, all)
				if err != nil {
					return err
				}
				return printAnswer(cmd.OutOrStdout(), asJSON, api.ForceUnlocked{Name: name, Released: released}, printUnlocked)
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "required: release a lock held by someone else")
	cmd.Flags().Uint64Var(&token, "token", 0, "the holder's fencing token")
	cmd.Flags().StringVar(&lease, "lease", "", "the holder's lease id")
	cmd.Flags().BoolVar(&all, "all", false, "also drop NAME's waiters, not only its holders")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// release force-unlocks the ticket of name with token or lease or, with
// neither, name's holders in the cluster's table (all: its waiters first,
// last in line first, so none is granted on the way, then its holders);
// it returns the leases released.
func release(ctx context.Context, c *client.Client, name string, token uint64, lease string, all bool) ([]string, error) {
	if token != 0 || lease != "" {
		released, err := c.ForceUnlock(ctx, name, lease, token, user())
		if err != nil {
			return nil, apiError("unlock", err)
		}
		return released, nil
	}
	tab, err := c.Locks(ctx, name)
	if err != nil {
		return nil, apiError("unlock", err)
	}
	var waiters, holders []string
	for _, l := range tab.Locks {
		if l.Name != name {
			continue
		}
		for _, e := range l.Entries {
			switch {
			case e.Holder:
				holders = append(holders, e.Request)
			case all:
				waiters = append(waiters, e.Request)
			}
		}
	}
	slices.Reverse(waiters)
	var released []string
	for _, req := range append(waiters, holders...) {
		r, err := c.ForceUnlock(ctx, name, req, 0, user())
		if errors.Is(err, semaphore.ErrUnknownLease) {
			continue // released or ended meanwhile
		}
		if err != nil {
			return nil, apiError("unlock", err)
		}
		released = append(released, r...)
	}
	if len(released) == 0 {
		what := "holder"
		if all {
			what = "ticket"
		}
		return nil, &exitError{code: ExitFailure, msg: fmt.Sprintf("unlock: no %s of %s in the cluster's table", what, tableName(name))}
	}
	return released, nil
}

func printUnlocked(out io.Writer, u api.ForceUnlocked) {
	for _, r := range u.Released {
		fmt.Fprintf(out, "released %s on %s\n", r, tableName(u.Name))
	}
}
