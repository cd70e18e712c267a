package api_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// race runs f(i) for i in [0, n) at once, released together.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

func TestConcurrentPaymentsNeverOversell(t *testing.T) {
	t.Parallel()
	const buyers, stock = 50, 7
	e := newEnv(t)
	p := e.createProduct(t, "last units", 1000, stock)
	orders := make([]int64, buyers)
	for i := range orders {
		orders[i] = e.createOrder(t, "buyer-"+strconv.Itoa(i), [2]int64{p, 1}).ID
	}
	statuses := make([]int, buyers)
	race(buyers, func(i int) {
		statuses[i] = e.do(t, "POST", fmt.Sprintf("/api/v1/orders/%d/payments", orders[i]), "buyer-"+strconv.Itoa(i), "").Status
	})

	var winners []string
	for i, s := range statuses {
		switch s {
		case http.StatusOK:
			winners = append(winners, strconv.FormatInt(orders[i], 10))
		case http.StatusConflict:
		default:
			t.Errorf("payment %d: status %d", i, s)
		}
	}
	slices.Sort(winners)
	if len(winners) != stock {
		t.Errorf("%d payments succeeded, want %d", len(winners), stock)
	}
	if left := e.db.Int(t, `SELECT stock FROM products WHERE id = $1`, p); left != 0 {
		t.Errorf("stock left %d, want 0", left)
	}
	var paid []string
	for _, id := range orders {
		if e.db.Int(t, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'PAID'`, id) == 1 {
			paid = append(paid, strconv.FormatInt(id, 10))
		}
	}
	slices.Sort(paid)
	if diff := cmp.Diff(winners, paid); diff != "" {
		t.Errorf("PAID orders differ from the successful payments (-winners +paid):\n%s", diff)
	}
	var paidEvents []string
	depleted := 0
	for _, ev := range e.db.Events(t, 0) {
		switch ev.Type {
		case "loopers.order.paid.v1":
			paidEvents = append(paidEvents, ev.AggregateID)
		case "loopers.stock.depleted.v1":
			depleted++
		}
	}
	slices.Sort(paidEvents)
	if diff := cmp.Diff(winners, paidEvents); diff != "" {
		t.Errorf("OrderPaid events differ from the successful payments (-winners +events):\n%s", diff)
	}
	if depleted != 1 {
		t.Errorf("%d StockDepleted events, want 1", depleted)
	}
	if n := e.db.Int(t, `SELECT count(*) FROM payments`); n != stock {
		t.Errorf("%d payments rows, want %d", n, stock)
	}
}

func TestConcurrentLikesBySameUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "popular", 1, 1)
	path := fmt.Sprintf("/api/v1/products/%d/likes", p)
	race(50, func(int) {
		if r := e.do(t, "POST", path, "fan", ""); r.Status != http.StatusOK {
			t.Errorf("like: %d %s", r.Status, r.Body)
		}
	})
	if n := e.db.Int(t, `SELECT count(*) FROM likes`); n != 1 {
		t.Errorf("%d likes, want 1", n)
	}
	want := []string{"loopers.like.created.v1"}
	var got []string
	for _, ev := range e.db.Events(t, 0) {
		got = append(got, ev.Type)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
}

// TestOutboxOrderIsCommitOrderPerProduct races likes, unlikes and views of
// one product by many users, several requests per user at once. A deferred
// trigger in the test database numbers outbox rows in the order their
// transactions reach commit; for every pair of like events of one user id
// order must be that commit order (the like consumer orders each user's
// like of a product by sequence; views, and likes of different users,
// commute, and commit side by side). Then the product's like events,
// replayed in id order, must alternate per user and end with the like set
// of the likes table.
func TestOutboxOrderIsCommitOrderPerProduct(t *testing.T) {
	t.Parallel()
	const users, workers, ops = 6, 4, 12
	e := newEnv(t)
	e.db.Exec(t, `CREATE SEQUENCE commit_seq;
		CREATE TABLE commit_order (outbox_id BIGINT PRIMARY KEY, seq BIGINT NOT NULL);
		CREATE FUNCTION record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO commit_order VALUES (NEW.id, nextval('commit_seq')); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER record_commit AFTER INSERT ON outbox
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit();`)
	p := e.createProduct(t, "contested", 1, 1)
	path := fmt.Sprintf("/api/v1/products/%d/likes", p)
	race(users*workers, func(w int) {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		user := "user-" + strconv.Itoa(w%users)
		for range ops {
			switch rng.IntN(5) {
			case 0, 1:
				e.do(t, "POST", path, user, "")
			case 2, 3:
				e.do(t, "DELETE", path, user, "")
			case 4:
				e.do(t, "GET", fmt.Sprintf("/api/v1/products/%d", p), user, "")
			}
		}
	})

	type event struct {
		id, seq   int64
		typ, user string
	}
	var evs []event
	for _, r := range e.db.Outbox(t, 0) {
		var ev struct{ UserID string }
		if err := json.Unmarshal([]byte(r.Payload), &ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, event{r.ID, e.db.Int(t, `SELECT seq FROM commit_order WHERE outbox_id = $1`, r.ID), r.Type, ev.UserID})
	}
	const view = "loopers.product.viewed.v1"
	for i, a := range evs {
		for _, b := range evs[i+1:] {
			if a.typ != view && b.typ != view && a.user == b.user && a.seq > b.seq {
				t.Errorf("outbox %d (%s by %s) committed after outbox %d (%s)", a.id, a.typ, a.user, b.id, b.typ)
			}
		}
	}

	liked := map[string]bool{}
	for _, r := range e.db.Outbox(t, 0) {
		var ev struct{ UserID string }
		if err := json.Unmarshal([]byte(r.Payload), &ev); err != nil {
			t.Fatal(err)
		}
		switch r.Type {
		case "loopers.like.created.v1":
			if liked[ev.UserID] {
				t.Errorf("outbox %d: %s likes again without a cancel before it", r.ID, ev.UserID)
			}
			liked[ev.UserID] = true
		case "loopers.like.canceled.v1":
			if !liked[ev.UserID] {
				t.Errorf("outbox %d: %s cancels a like that the replay has not seen", r.ID, ev.UserID)
			}
			delete(liked, ev.UserID)
		}
	}
	var replayed, table []string
	for u := range liked {
		replayed = append(replayed, u)
	}
	slices.Sort(replayed)
	for _, row := range e.db.Snapshot(t)["likes"] {
		var l struct {
			UserID string `json:"user_id"`
		}
		if err := json.Unmarshal([]byte(row), &l); err != nil {
			t.Fatal(err)
		}
		table = append(table, l.UserID)
	}
	slices.Sort(table)
	if diff := cmp.Diff(table, replayed); diff != "" {
		t.Errorf("replayed like set differs from the likes table (-table +replay):\n%s", diff)
	}
}

func TestConcurrentPaymentsOfOneOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "plenty", 10, 100)
	o := e.createOrder(t, "eve", [2]int64{p, 3})
	counts := map[int]int{}
	var mu sync.Mutex
	race(10, func(int) {
		s := e.do(t, "POST", fmt.Sprintf("/api/v1/orders/%d/payments", o.ID), "eve", "").Status
		mu.Lock()
		counts[s]++
		mu.Unlock()
	})
	if diff := cmp.Diff(map[int]int{http.StatusOK: 1, http.StatusConflict: 9}, counts); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if left := e.db.Int(t, `SELECT stock FROM products WHERE id = $1`, p); left != 97 {
		t.Errorf("stock %d, want 97", left)
	}
	if n := e.db.Int(t, `SELECT count(*) FROM outbox WHERE event_type = 'loopers.order.paid.v1'`); n != 1 {
		t.Errorf("%d OrderPaid events, want 1", n)
	}
}

// TestPaymentsLockProductsInIDOrder pays orders naming the same two
// products in opposite orders at once; locking in the order of the lines
// would deadlock (PostgreSQL would abort one side with a 500).
func TestPaymentsLockProductsInIDOrder(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t)
	a := e.createProduct(t, "a", 10, n)
	b := e.createProduct(t, "b", 20, n)
	orders := make([]int64, n)
	for i := range orders {
		if i%2 == 0 {
			orders[i] = e.createOrder(t, "u", [2]int64{a, 1}, [2]int64{b, 1}).ID
		} else {
			orders[i] = e.createOrder(t, "u", [2]int64{b, 1}, [2]int64{a, 1}).ID
		}
	}
	race(n, func(i int) {
		if r := e.do(t, "POST", fmt.Sprintf("/api/v1/orders/%d/payments", orders[i]), "u", ""); r.Status != http.StatusOK {
			t.Errorf("order %d: %d %s", orders[i], r.Status, r.Body)
		}
	})
	var depleted []string
	for _, ev := range e.db.Events(t, 0) {
		if ev.Type == "loopers.stock.depleted.v1" {
			depleted = append(depleted, ev.AggregateID)
		}
	}
	slices.Sort(depleted)
	if diff := cmp.Diff([]string{strconv.FormatInt(a, 10), strconv.FormatInt(b, 10)}, depleted); diff != "" {
		t.Errorf("StockDepleted events (-want +got):\n%s", diff)
	}
}

// TestPlacingOrdersWhilePayingAndLiking mixes, on the same two products,
// placing orders whose lines name them against id order, paying orders, and
// liking and unliking. Placing an order takes key-share locks on its products
// through the foreign keys, in line order; writers locking products FOR
// UPDATE would conflict with those and deadlock (a 500 here).
func TestPlacingOrdersWhilePayingAndLiking(t *testing.T) {
	t.Parallel()
	const n = 60
	e := newEnv(t)
	a := e.createProduct(t, "a", 10, 10*n)
	b := e.createProduct(t, "b", 20, 10*n)
	paid := make([]int64, n)
	for i := range paid {
		paid[i] = e.createOrder(t, "u", [2]int64{a, 1}, [2]int64{b, 1}).ID
	}
	body := fmt.Sprintf(`{"items":[{"productId":%d,"quantity":1},{"productId":%d,"quantity":1}]}`, b, a)
	race(3*n, func(i int) {
		var r response
		switch i % 3 {
		case 0:
			r = e.do(t, "POST", "/api/v1/orders", "u", body)
		case 1:
			r = e.do(t, "POST", fmt.Sprintf("/api/v1/orders/%d/payments", paid[i/3]), "u", "")
		default:
			method := []string{"POST", "DELETE"}[i/3%2]
			r = e.do(t, method, fmt.Sprintf("/api/v1/products/%d/likes", []int64{a, b}[i/3%2]), fmt.Sprint("liker-", i%7), "")
		}
		if r.Status >= 300 {
			t.Errorf("request %d: %d %s", i, r.Status, r.Body)
		}
	})
}
