package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/outboxops"
)

func outboxCommand() *command {
	return &command{name: "outbox", summary: "the outbox: failed events, relay status", sub: []*command{
		{name: "failed", summary: "events the relay gave up on: list, redrive", sub: []*command{
			{name: "list", summary: "list outbox_failed rows, oldest first", flags: outboxFailedList},
			{name: "redrive", summary: "move outbox_failed rows back into the outbox with their event id and sequence", flags: outboxFailedRedrive},
		}},
		{name: "status", summary: "relay cursor, backlog, oldest unpublished age, leader and token", flags: outboxStatus},
	}}
}

func (e env) outboxStore(ctx context.Context) (*outboxops.Store, error) {
	url, err := e.setting(func(l *config.Loader) string { return l.URL("DATABASE_URL", "postgres", "postgresql") })
	if err != nil {
		return nil, err
	}
	return outboxops.Open(ctx, url)
}

func outboxFailedList(fs *flag.FlagSet) func(context.Context, env, output, []string) error {
	limit := fs.Int("limit", 100, fmt.Sprintf("most rows listed (1 to %d)", maxLimit))
	return func(ctx context.Context, e env, out output, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *limit < 1 || *limit > maxLimit {
			return usagef("--limit must be 1 to %d, got %d", maxLimit, *limit)
		}
		st, err := e.outboxStore(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		rows, err := st.ListFailed(ctx, *limit)
		if err != nil {
			return err
		}
		if rows == nil {
			rows = []outboxops.Failed{}
		}
		return out.print(rows, []string{"ID", "OUTBOX ID", "SEQUENCE", "EVENT ID", "TYPE", "AGGREGATE", "FAILED", "ERROR"}, func(row func(...any)) {
			for _, f := range rows {
				row(f.ID, f.OutboxID, f.Sequence, f.EventID, f.EventType, f.AggregateType+"/"+f.AggregateID, f.FailedAt.UTC().Format(time.RFC3339), f.Error)
			}
		})
	}
}

// idsFlag collects --id N, repeatable and comma-separated.
type idsFlag []int64

func (f *idsFlag) String() string { return fmt.Sprint([]int64(*f)) }

func (f *idsFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("want a positive outbox_failed id, got %q", s)
		}
		*f = append(*f, id)
	}
	return nil
}

func outboxFailedRedrive(fs *flag.FlagSet) func(context.Context, env, output, []string) error {
	var ids idsFlag
	fs.Var(&ids, "id", "outbox_failed ids to re-drive: --id 3 4 5, --id 3,4,5 or --id 3 --id 4")
	all := fs.Bool("all", false, "re-drive every outbox_failed row")
	dryRun := fs.Bool("dry-run", false, "show what would be re-driven; change nothing")
	by := fs.String("by", "", "who re-drives, for the audit (default $USER@host)")
	return func(ctx context.Context, e env, out output, args []string) error {
		// `--id 3 4 5`: the ids after the first are positional arguments.
		if len(ids) == 0 {
			if err := noArgs(args); err != nil {
				return err
			}
		}
		for _, a := range args {
			if err := ids.Set(a); err != nil {
				return usagef("--id: %v", err)
			}
		}
		if (len(ids) > 0) == *all {
			return usagef("give either --id N… or --all")
		}
		who := *by
		if who == "" {
			who = defaultActor(e)
		}
		st, err := e.outboxStore(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		sel := outboxops.Selection{IDs: ids, All: *all, Progress: func(n int) {
			// Chunks commit one by one: a re-drive cut short keeps what it moved.
			fmt.Fprintf(e.stderr, "re-driven %d so far\n", n)
		}}
		moved, err := st.Redrive(ctx, sel, who, *dryRun)
		if err != nil {
			return err
		}
		if moved == nil {
			moved = []outboxops.Redriven{}
		}
		return out.print(moved, []string{"ID", "EVENT ID", "SEQUENCE", "TYPE", "FROM OUTBOX ID", "NEW OUTBOX ID"}, func(row func(...any)) {
			for _, m := range moved {
				to := "(dry run)"
				if m.NewOutboxID != 0 {
					to = strconv.FormatInt(m.NewOutboxID, 10)
				}
				row(m.ID, m.EventID, m.Sequence, m.EventType, m.OutboxID, to)
			}
		})
	}
}

// defaultActor names the operator for the audit: $USER@host.
func defaultActor(e env) string {
	user, _ := e.lookup("USER")
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil {
		return user
	}
	return user + "@" + host
}

func outboxStatus(fs *flag.FlagSet) func(context.Context, env, output, []string) error {
	return func(ctx context.Context, e env, out output, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		st, err := e.outboxStore(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		s, err := st.Status(ctx)
		if err != nil {
			return err
		}
		return out.print(s, []string{"CURSOR", "BACKLOG", "OLDEST UNPUBLISHED", "FAILED", "LEADER", "TOKEN", "LEASE"}, func(row func(...any)) {
			leader, token, lease := "-", "-", "never held"
			switch l := s.Leader; {
			case l != nil:
				leader, token = l.Owner, strconv.FormatInt(l.Token, 10)
				lease = "live until " + l.Until.UTC().Format(time.RFC3339)
			case s.Terms > 0:
				lease = "not held; last term " + strconv.FormatInt(s.Terms, 10)
			}
			row(s.Cursor, s.Backlog, age(s.OldestAge), s.Failed, leader, token, lease)
		})
	}
}
