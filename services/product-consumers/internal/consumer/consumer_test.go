package consumer

import (
	"testing"
)

// TestGroupsAreDistinct: two consumers sharing a group would split one
// topic's partitions between them, and share idempotency keys.
func TestGroupsAreDistinct(t *testing.T) {
	h := &Handlers{} // Spec needs no dependency
	owner := map[string]string{}
	for _, name := range Names {
		spec, err := h.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Group == "" {
			t.Errorf("consumer %s has no group", name)
		}
		if other, dup := owner[spec.Group]; dup {
			t.Errorf("consumers %s and %s share group %q", other, name, spec.Group)
		}
		owner[spec.Group] = name
	}
}
