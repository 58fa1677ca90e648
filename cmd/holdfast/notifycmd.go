package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/store"
)

func newNotifyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "notify", Short: "Notification targets: webhooks, healthchecks.io checks, commands; and their delivery log"}
	cmd.AddCommand(newNotifyAddCmd(g), newNotifyListCmd(g), newNotifyRemoveCmd(g), newNotifyTestCmd(g), newNotifyLogCmd(g))
	return cmd
}

type targetOut struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Where      string   `json:"where"` // the URL's scheme and host, or the program: never a secret
	SecretFile string   `json:"secret_file,omitempty"`
	Job        string   `json:"job,omitempty"`
	Events     []string `json:"events"`
	CreatedAt  string   `json:"created_at"`
}

func targetJSON(t model.Target) targetOut {
	where := notify.Redact(t.URL)
	if t.Kind == model.TargetCommand {
		where = t.Command[0]
	}
	return targetOut{Name: t.Name, Kind: t.Kind, Where: where, SecretFile: t.SecretFile, Job: t.Job, Events: t.Events,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339)}
}

// notifyFlags binds what `notify add` takes.
type notifyFlags struct {
	t                                          model.Target
	webhook, healthchecks, events, channelFile string
}

func (nf *notifyFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&nf.webhook, "webhook", "", "POST each event as JSON to this URL")
	f.StringVar(&nf.t.SecretFile, "secret-file", "", "with --webhook: sign each request with HMAC-SHA256 under the key in this file (X-Holdfast-Signature)")
	f.StringVar(&nf.healthchecks, "healthchecks", "", "ping this healthchecks.io check URL: /start, success, /fail, the run id as rid")
	f.StringArrayVar(&nf.t.Command, "command", nil, "run this program (absolute path; then its arguments, one per flag) with the event as JSON on stdin")
	f.StringVar(&nf.channelFile, "channel-url-file", "", "send each event as a message through the service whose URL this file holds, root's, mode 0600 "+
		"(shoutrrr's URLs of "+strings.Join(notify.ChannelSchemes, ", ")+"; generic+https://HOST/PATH posts to any URL)")
	f.StringVar(&nf.t.Job, "job", "", "only this job's events")
	f.StringVar(&nf.events, "events", "", "comma-separated: "+strings.Join(notify.Events, ",")+" (default: all but started and restore_requested)")
}

// target is the target named name the flags describe, checked.
func (nf *notifyFlags) target(name string) (model.Target, error) {
	t := nf.t
	t.Name = name
	given := 0
	for _, k := range []struct {
		set  bool
		kind string
		url  string
	}{{nf.webhook != "", model.TargetWebhook, nf.webhook}, {nf.healthchecks != "", model.TargetHealthchecks, nf.healthchecks},
		{len(t.Command) > 0, model.TargetCommand, ""}, {nf.channelFile != "", model.TargetChannel, ""}} {
		if k.set {
			given++
			t.Kind, t.URL = k.kind, k.url
		}
	}
	if given != 1 {
		return t, badInput("give exactly one of --webhook URL, --healthchecks URL, --command PROGRAM or --channel-url-file FILE")
	}
	if t.Kind == model.TargetChannel {
		if t.SecretFile != "" {
			return t, badInput("--secret-file signs webhook requests: a channel's secret is in its URL file")
		}
		t.SecretFile = nf.channelFile
	}
	if nf.events != "" {
		t.Events = strings.Split(nf.events, ",")
	}
	if err := notify.ValidateTarget(&t); err != nil {
		return t, inputError{err}
	}
	return t, nil
}

func newNotifyAddCmd(g *globals) *cobra.Command {
	var nf notifyFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add NAME (--webhook URL [--secret-file F] | --healthchecks URL | --command PROG [--command ARG]... | --channel-url-file F)",
		Short: "Add a notification target; events from now on are delivered to it",
		Example: `  holdfast notify add ops --webhook https://hooks.example.com/holdfast --secret-file /etc/holdfast/hook.key
  holdfast notify add nightly-check --healthchecks https://hc-ping.com/UUID --job nightly --events started,succeeded,failed
  holdfast notify add mail --command /usr/local/bin/holdfast-mail --events failed,overdue,stalled
  holdfast notify add phone --channel-url-file /etc/holdfast/ntfy.url --events failed,verify_failed,overdue`,
		Args: exactArgs(1, "one target name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := nf.target(args[0])
			if err != nil {
				return err
			}
			if hiddenURL(t) {
				return badInput("--%s %s is a URL with its secret part hidden, as holdfast prints it: give the whole URL", t.Kind, t.URL)
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if t.Job != "" {
					if _, err := st.JobGet(ctx, t.Job); err != nil {
						return err
					}
				}
				if err := st.TargetCreate(ctx, t); err != nil {
					return err
				}
				added, err := st.TargetList(ctx, t.Name)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(targetJSON(added[0]))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "notification target %s added: %s to %s (events %s)\n", t.Name, t.Kind,
					targetJSON(added[0]).Where, strings.Join(added[0].Events, ","))
				if t.Kind == model.TargetCommand {
					fmt.Fprintln(cmd.ErrOrStderr(), "note: a daemon runs command targets only with --allow-notify-commands "+
						"(HOLDFAST_ALLOW_NOTIFY_COMMANDS=true), as its --notify-command-user (default nobody); elsewhere their deliveries fail, saying so")
				}
				return nil
			})
		},
	}
	nf.bind(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the target as JSON")
	return cmd
}

func newNotifyListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the notification targets (URLs shown without their path: it may be a secret)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				targets, err := st.TargetList(ctx, "")
				if err != nil {
					return err
				}
				out := []targetOut{}
				for _, t := range targets {
					out = append(out, targetJSON(t))
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TARGET\tKIND\tWHERE\tJOB\tEVENTS")
				for _, t := range out {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, t.Where, cmp.Or(t.Job, "every job"), strings.Join(t.Events, ","))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the targets as JSON")
	return cmd
}

func newNotifyRemoveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a notification target and its deliveries",
		Args:  exactArgs(1, "one target name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if err := st.TargetDelete(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "notification target %s removed\n", args[0])
				return nil
			})
		},
	}
}

func newNotifyTestCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "test NAME",
		Short: "Send a test event to a target now, from this process (exit 1 if it fails)",
		Long: "Send a test event to a target now, from this process (exit 1 if it fails). A command target's program runs " +
			"as the daemon's default --notify-command-user (nobody) when this is root, else as you.",
		Args: exactArgs(1, "one target name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				targets, err := st.TargetList(ctx, args[0])
				if err != nil {
					return err
				}
				// Asked for by name: a command target runs, as the daemon would run it.
				commandUser := notify.DefaultCommandUser
				if os.Geteuid() != 0 {
					commandUser = strconv.Itoa(os.Geteuid())
				}
				d, err := notify.New(notify.Config{Store: st, JournalDir: g.journalDir, AllowCommands: true, CommandUser: commandUser})
				if err != nil {
					return err
				}
				t := targets[0]
				e := model.Event{ID: uuid.New(), Event: "succeeded", Job: cmp.Or(t.Job, "holdfast-test"), Status: "succeeded",
					Reason: "a test event from holdfast notify test", At: time.Now(), Details: json.RawMessage(`{"test":true}`)}
				if err := d.Send(ctx, t, e); err != nil {
					return fmt.Errorf("notification target %s: %w", t.Name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "notification target %s: test event %s delivered\n", t.Name, e.ID)
				return nil
			})
		},
	}
}

type deliveryOut struct {
	EventID     string  `json:"event_id"`
	Event       string  `json:"event"`
	Job         string  `json:"job"`
	Run         *string `json:"run"`
	At          string  `json:"at"`
	Target      string  `json:"target"`
	State       string  `json:"state"`
	Tries       int     `json:"tries"`
	NextAt      *string `json:"next_at"`
	LastError   string  `json:"last_error,omitempty"`
	DeliveredAt *string `json:"delivered_at"`
}

func newNotifyLogCmd(g *globals) *cobra.Command {
	var asJSON bool
	var target string
	var limit int
	cmd := &cobra.Command{
		Use:   "log",
		Short: "Show the deliveries of events to targets, newest first: delivered, pending (with the next try) or failed",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return badInput("--limit %d: give a positive number", limit)
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				if target != "" {
					if _, err := st.TargetList(ctx, target); err != nil {
						return err
					}
				}
				ds, err := st.DeliveryList(ctx, target, limit)
				if err != nil {
					return err
				}
				out := []deliveryOut{}
				for _, d := range ds {
					o := deliveryOut{EventID: d.Event.ID.String(), Event: d.Event.Event, Job: d.Event.Job,
						At: d.Event.At.UTC().Format(time.RFC3339Nano), Target: d.Target.Name, State: d.State, Tries: d.Tries,
						LastError: d.LastError, DeliveredAt: timeStr(d.DeliveredAt)}
					if d.Event.Run != nil {
						id := d.Event.Run.String()
						o.Run = &id
					}
					if d.State == "pending" {
						o.NextAt = timeStr(&d.NextAt)
					}
					out = append(out, o)
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "AT\tTARGET\tEVENT\tJOB\tRUN\tSTATE\tTRIES\tLAST ERROR")
				for _, o := range out {
					run := "-"
					if o.Run != nil {
						run = (*o.Run)[:8]
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", o.At, o.Target, o.Event, o.Job, run, o.State, o.Tries, o.LastError)
				}
				return tw.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the deliveries as JSON")
	f.StringVar(&target, "target", "", "only this target's deliveries")
	f.IntVar(&limit, "limit", 50, "at most this many deliveries")
	return cmd
}
