// Package benchkit holds what the benchmarks that drive the running pipeline
// share: a call to commerce-api, the aggregates' counts of a set of
// products, a service's CPU profile, and the sizes of cluster they run on.
package benchkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/devkafka"
)

// Call sends one request, bound to ctx, with a JSON body to commerce-api as user (none
// when empty) and decodes a 2xx answer into out (when not nil); any other
// status is an error that quotes the answer.
func Call(ctx context.Context, client *http.Client, method, url, user, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-User-ID", user)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Counts are a product's view_count and like_count.
type Counts struct{ Views, Likes int64 }

// ReadCounts reads the views and likes of products from their aggregate
// tables (not the product_metrics view: both rows of a product exist from
// its creation, and a read by primary key stays cheap when polled often).
// A product without rows is left out.
func ReadCounts(ctx context.Context, conn *pgx.Conn, products []int64) (map[int64]Counts, error) {
	rows, err := conn.Query(ctx, `SELECT v.product_id, v.view_count, l.like_count
		FROM product_views v JOIN product_likes l USING (product_id) WHERE product_id = ANY($1)`, products)
	if err != nil {
		return nil, err
	}
	got := make(map[int64]Counts, len(products))
	for rows.Next() {
		var id int64
		var c Counts
		if err := rows.Scan(&id, &c.Views, &c.Likes); err != nil {
			return nil, err
		}
		got[id] = c
	}
	return got, rows.Err()
}

// FetchProfile saves the CPU profile url answers (a service's
// /debug/pprof/profile) to path.
func FetchProfile(url, path string) error {
	resp, err := http.Get(url) //nolint:noctx // bounded by the profile's seconds
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// DefaultNodes is the -nodes flag's default of the benchmarks that run on
// Apache Kafka: three nodes first (every topic with three replicas and
// min.insync.replicas=2, what production runs and acks=all waits on), one
// node's figures beside, in the same run.
const DefaultNodes = "3,1"

// ParseNodes reads a -nodes flag: the cluster sizes to run on, in order,
// each on a fresh cluster. The embedded broker (kind devkafka.Embedded) has
// one node: the default becomes 1 there, and a larger size is refused.
func ParseNodes(flagValue, kind string) ([]int, error) {
	if kind == devkafka.Embedded && flagValue == DefaultNodes {
		return []int{1}, nil
	}
	var out []int
	for f := range strings.SplitSeq(flagValue, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-nodes: %q is not a list of cluster sizes (3,1)", flagValue)
		}
		if kind == devkafka.Embedded && n > 1 {
			return nil, fmt.Errorf("-nodes %d: the embedded broker has one node (KAFKA=real runs a cluster)", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// ClusterLabel names a cluster of n nodes in a benchmark's output.
func ClusterLabel(n int) string {
	if n == 1 {
		return "1 node (replication factor 1)"
	}
	return fmt.Sprintf("%d nodes (replication factor %d, min.insync.replicas=%d)", n, devkafka.Replication(n), devkafka.MinInsync(n))
}
