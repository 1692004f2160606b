package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/sluicehq/sluice/semaphore"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/p2p"
	"github.com/sluicehq/sluice/semaphore/api"
	"github.com/sluicehq/sluice/semaphore/client"
)

// changeWait bounds `members add/remove`: longer than the agent's own 30 s
// bound, so that its answer (change_timedout) comes first.
const changeWait = 40 * time.Second

func newMembersCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the cluster's members; add or remove one",
		Long: "List the cluster's members (voters) and the other nodes the agent\n" +
			"knows of. Members vote in elections and can lead; other nodes take\n" +
			"locks but have no vote.\n" +
			"\n" +
			"To add a machine, first start its agent with `sluice agent --join\n" +
			"--peers ...` so that it joins the mesh as a non-member, then run\n" +
			"`sluice members add ID` with its peer id (`sluice id`) or the node\n" +
			"number this list shows. To replace a machine, remove the old one and\n" +
			"add the new one: `sluice members remove ID`, then `members add`.\n" +
			"\n" +
			"Changes go one at a time, and each needs a majority of the old and a\n" +
			"majority of the new members alive to commit. A change that is refused\n" +
			"changed nothing; one that was not confirmed in time may still commit:\n" +
			"list the members to see.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withAgent(callTimeout, func(ctx context.Context, c *client.Client) error {
				l, err := c.Members(ctx)
				if err != nil {
					return apiError("members", err)
				}
				return printAnswer(cmd.OutOrStdout(), asJSON, l, printMembers)
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newMembersChangeCmd("add", "added", "Make a running node a member (voter)", (*client.Client).AddMember),
		newMembersChangeCmd("remove", "removed", "Take a member out of the voters", (*client.Client).RemoveMember),
		newMembersVouchCmd())
	return cmd
}

func newMembersVouchCmd() *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "vouch",
		Short: "Vouch that this agent's data directory is its own, so it can check in",
		Long: "A member that restarts checks in with a majority of the other members\n" +
			"before it votes or serves: they refuse a store older than what they\n" +
			"know of it. When too few of them will ever come back (one of three\n" +
			"machines lost for good, and this one restarted), it cannot check in,\n" +
			"and without its vote the lost member cannot be removed either.\n" +
			"\n" +
			"Run this on the agent that waits, only if its data directory was never\n" +
			"restored from a backup or a copy, wiped, or taken from another machine:\n" +
			"it then checks in with a majority of all members counting itself (two\n" +
			"of three). Then remove the lost member and add its replacement. If the\n" +
			"directory was restored, do not vouch: replace the node (see the manual's\n" +
			"runbooks); vouching for a restored copy can grant a lock twice.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cf.withAgent(callTimeout, func(ctx context.Context, c *client.Client) error {
				v, err := c.VouchStore(ctx)
				var ae *client.APIError
				switch {
				case err == nil:
				case errors.Is(err, client.ErrMembership) && errors.As(err, &ae):
					return &exitError{code: ExitFailure, msg: "members vouch: " + ae.Message}
				default:
					return apiError("members vouch", err)
				}
				return printAnswer(cmd.OutOrStdout(), asJSON, v, printVouched)
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newMembersChangeCmd(verb, done, short string,
	change func(*client.Client, context.Context, string) (api.MembersChanged, error)) *cobra.Command {
	var (
		cf     clientFlags
		asJSON bool
	)
	what := "members " + verb
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Long: short + ", ID being its peer id or node number. It waits until\n" +
			"the change commits (up to 30 s); see 'sluice members --help'.",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s: one ID (a peer id or node number), got %d arguments", what, len(args))
			}
			if n, err := strconv.ParseUint(args[0], 10, 64); err == nil && n > 0 {
				return nil
			}
			if _, err := p2p.ParsePeerIDs(args[:1]); err != nil {
				return usageErrorf("%s: %q is neither a peer id (`sluice id`) nor a node number", what, args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			return cf.withAgent(changeWait, func(ctx context.Context, c *client.Client) error {
				res, err := change(c, ctx, id)
				var ae *client.APIError
				switch {
				case err == nil:
				case errors.Is(err, client.ErrMembership) && errors.As(err, &ae):
					// The agent's reason is the whole story: nothing changed.
					return &exitError{code: ExitFailure, msg: fmt.Sprintf("%s: %s", what, ae.Message)}
				case errors.Is(err, semaphore.ErrChangeTimedOut):
					return &exitError{code: ExitFailure,
						msg: fmt.Sprintf("%s: not confirmed in time; it may still commit: check 'sluice members'", what)}
				default:
					return apiError(what, err)
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return printJSON(out, res)
				}
				fmt.Fprintf(out, "%s %s: view epoch %d", done, id, res.Epoch)
				if voters := voterList(res.Members); voters != "" {
					fmt.Fprintf(out, ", members: %s", voters)
				}
				fmt.Fprintln(out)
				return nil
			})
		},
	}
	cf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printMembers(w io.Writer, l api.MemberList) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPEER\tNAME\tADDRESS\tVOTER\tLEADER\tREACHABLE\tVERSION")
	voters := 0
	for _, m := range l.Members {
		if m.Voter {
			voters++
		}
		leader := ""
		if m.Leader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Node, orDash(m.Peer), orDash(m.Name), orDash(m.Address),
			yesNo(m.Voter), leader, yesNo(m.Reachable), orDash(m.Version))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "cluster %s, view epoch %d, %d voters", l.Cluster, l.Epoch, voters)
	if l.Codec > 0 { // an agent of the previous release says nothing of codecs
		fmt.Fprintf(w, ", all read codec %d", l.Codec)
	}
	if l.Level > 0 {
		fmt.Fprintf(w, ", cluster codec %d", l.Level)
		var holding []string
		for _, m := range l.Members {
			if m.Voter && m.Offers > 0 && m.Offers < l.Codec {
				holding = append(holding, cmp.Or(m.Name, m.Node))
			}
		}
		if len(holding) > 0 {
			fmt.Fprintf(w, " (held by %s)", strings.Join(holding, ", "))
		}
	}
	fmt.Fprintln(w)
}

// voterList names the voters: "1 (alpha), 2 (beta)".
func voterList(l api.MemberList) string {
	var vs []string
	for _, m := range l.Members {
		if !m.Voter {
			continue
		}
		v := m.Node
		if m.Name != "" {
			v += " (" + m.Name + ")"
		}
		vs = append(vs, v)
	}
	return strings.Join(vs, ", ")
}

// orDash keeps a column that the agent could not fill visible.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printVouched(out io.Writer, v api.StoreVouched) {
	if v.CheckedIn {
		fmt.Fprintf(out, "vouched for node %s's store: checked in\n", v.Node)
	} else {
		fmt.Fprintf(out, "vouched for node %s's store: %s\n", v.Node, v.Reason)
	}
}
