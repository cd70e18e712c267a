package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/loopers/commerce-pipeline/internal/cluster"
)

// ClusterView reads the cluster registry (cluster.Member, which serves it
// from a copy read at most once a second, and cluster.Store implement it).
type ClusterView interface {
	View(ctx context.Context) (cluster.View, error)
}

// clusterView serves GET /api/v1/cluster on the admin listener: nodes, the
// relay leader and its history, and each group's partition table.
func clusterView(cv ClusterView) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		v, err := cv.View(r.Context())
		if err != nil {
			return fmt.Errorf("cluster view: %w", err)
		}
		return writeJSON(w, http.StatusOK, v)
	}
}
