package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStateChangeAndOutboxCommitTogether injects failures through the
// database itself: an outbox insert that fails (the domain write before it
// must roll back), and a failure at commit time, after both the domain write
// and the outbox insert (neither may remain).
//
//nolint:paralleltest // the cases run in turn: each installs a fault on the shared database and removes it
func TestStateChangeAndOutboxCommitTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.db.Exec(t, `CREATE FUNCTION fail_injected() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected failure'; END $$`)
	p := e.createProduct(t, "fragile", 500, 2)
	liked := e.createProduct(t, "liked", 500, 2)
	e.do(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", liked), "carol", "")
	o := e.createOrder(t, "carol", [2]int64{p, 2})

	faults := []struct{ name, install, remove string }{
		{"outbox insert fails",
			`CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION fail_injected()`,
			`DROP TRIGGER fail_outbox ON outbox`},
		{"commit fails after the outbox insert",
			`CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON outbox DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_injected()`,
			`DROP TRIGGER fail_commit ON outbox`},
	}
	requests := []struct{ name, method, path string }{
		{"like", "POST", fmt.Sprintf("/api/v1/products/%d/likes", p)},
		{"unlike", "DELETE", fmt.Sprintf("/api/v1/products/%d/likes", liked)},
		{"view", "GET", fmt.Sprintf("/api/v1/products/%d", p)},
		{"pay", "POST", fmt.Sprintf("/api/v1/orders/%d/payments", o.ID)},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			e.db.Exec(t, f.install)
			defer e.db.Exec(t, f.remove)
			for _, rq := range requests {
				t.Run(rq.name, func(t *testing.T) {
					before := e.db.Snapshot(t)
					decode[problemBody](t, e.do(t, rq.method, rq.path, "carol", ""), http.StatusInternalServerError)
					if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
						t.Errorf("a failed transaction left changes (-before +after):\n%s", diff)
					}
				})
			}
		})
	}

	// Without the fault the same requests succeed, so it was the fault that
	// stopped them.
	for _, rq := range requests {
		if r := e.do(t, rq.method, rq.path, "carol", ""); r.Status != http.StatusOK {
			t.Errorf("%s without a fault: %d %s", rq.name, r.Status, r.Body)
		}
	}
	if n := len(e.db.Events(t, 0)); n != 6 { // like, like, cancel, view, paid, depleted
		t.Errorf("%d outbox rows, want 6", n)
	}
}
