package main

import (
	"context"
	"encoding/json"
	"flag"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
)

func clusterCommand() *command {
	return &command{name: "cluster", summary: "nodes and their status, the relay leader and its history, who owns which partition", flags: clusterView}
}

// clusterView prints cluster.View: the same document as GET /api/v1/cluster
// with -o json.
func clusterView(*flag.FlagSet) func(context.Context, env, output, []string) error {
	return func(ctx context.Context, e env, out output, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		url, err := e.setting(func(l *config.Loader) string { return l.URL("DATABASE_URL", "postgres", "postgresql") })
		if err != nil {
			return err
		}
		st, err := cluster.Open(url)
		if err != nil {
			return err
		}
		defer st.Close()
		v, err := st.View(ctx)
		if err != nil {
			return err
		}
		if out.json {
			enc := json.NewEncoder(out.w)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}
		return cluster.WriteTable(out.w, v)
	}
}
