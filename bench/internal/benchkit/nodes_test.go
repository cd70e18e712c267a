package benchkit_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/bench/internal/benchkit"
	"github.com/loopers/commerce-pipeline/internal/devkafka"
)

func TestParseNodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, flag, kind string
		want             []int
		wantErr          bool
	}{
		{name: "the default on Apache Kafka: three nodes, then one", flag: benchkit.DefaultNodes, kind: devkafka.Real, want: []int{3, 1}},
		{name: "the default on kfake: its one node", flag: benchkit.DefaultNodes, kind: devkafka.Embedded, want: []int{1}},
		{name: "one size", flag: "3", kind: devkafka.Real, want: []int{3}},
		{name: "spaces", flag: "1, 3", kind: devkafka.Real, want: []int{1, 3}},
		{name: "more than one node on kfake", flag: "3", kind: devkafka.Embedded, wantErr: true},
		{name: "zero", flag: "0", kind: devkafka.Real, wantErr: true},
		{name: "not a number", flag: "3,x", kind: devkafka.Real, wantErr: true},
		{name: "empty", flag: "", kind: devkafka.Real, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := benchkit.ParseNodes(tc.flag, tc.kind)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseNodes(%q, %s): error %v, want error %t", tc.flag, tc.kind, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseNodes(%q, %s) (-want +got):\n%s", tc.flag, tc.kind, diff)
			}
		})
	}
}

func TestClusterLabel(t *testing.T) {
	t.Parallel()
	got := map[int]string{1: benchkit.ClusterLabel(1), 3: benchkit.ClusterLabel(3)}
	want := map[int]string{
		1: "1 node (replication factor 1)",
		3: "3 nodes (replication factor 3, min.insync.replicas=2)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterLabel (-want +got):\n%s", diff)
	}
}
