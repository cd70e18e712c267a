package cluster

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable renders v for a terminal: nodes, the relay leader and its
// recent history, then each group's partitions (pipelinectl cluster).
func WriteTable(w io.Writer, v View) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODES (at %s)\n", v.At.UTC().Format(time.RFC3339))
	fmt.Fprintln(tw, "NODE\tSERVICE\tSTATUS\tHEARTBEAT AGE\tSTARTED\tROLES")
	for _, n := range v.Nodes {
		status := n.Status
		if n.IDConflictAt != nil {
			status += " (id claimed by two processes, " + n.IDConflictAt.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs\t%s\t%s\n", n.ID, n.Service, status, n.HeartbeatAgeSeconds,
			n.StartedAt.UTC().Format(time.RFC3339), strings.Join(n.Roles, ","))
	}
	fmt.Fprintln(tw)
	if v.Leader != nil {
		fmt.Fprintf(tw, "RELAY LEADER: %s (token %d, since %s)\n", v.Leader.NodeID, v.Leader.Token, v.Leader.AcquiredAt.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(tw, "RELAY LEADER: none")
	}
	if len(v.LeaderHistory) > 0 {
		fmt.Fprintln(tw, "CHANGED\tNODE\tTOKEN\tREASON")
	}
	for _, h := range v.LeaderHistory {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", h.At.UTC().Format(time.RFC3339), h.NodeID, h.Token, h.Reason)
	}
	for _, g := range v.Groups {
		fmt.Fprintf(tw, "\nGROUP %s\n", g.Group)
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tSTATUS\tEPOCH\tVERSION\tLAG\tGAP\tBLOCKING\tASSIGNED\tMOVES")
		for _, p := range g.Partitions {
			owner := p.Owner
			if p.ReleasedAt != nil {
				owner += " (released)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\n", p.Topic, p.Partition, owner, p.OwnerStatus,
				p.Epoch, p.Version, opt(p.TrueLag), opt(p.GapSize), opt(p.Blocking), p.AssignedAt.UTC().Format(time.RFC3339), p.Moves)
		}
	}
	return tw.Flush()
}

func opt(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
