package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestProductPageFresh runs a flash sale on one product (likes by many
// users and views, about 300 requests/s) while a reader polls the product's
// page through the shipped commerce-api with its Redis cache on, during the
// sale and after it. Every poll that starts at least 1 s after the database
// showed a count must show at least that count: the cache's TTL (30 s) must
// not decide what users see.
//
//nolint:paralleltest // measures how stale the cached product page is: other tests' service processes on the 2 shared cores would skew it
func TestProductPageFresh(t *testing.T) {
	s := newSystem(t)
	s.startRelay("relay-a")
	s.startConsumers()
	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "flash sale", "price": 1000, "stock": 1000}, &p); st != http.StatusCreated {
		t.Fatalf("create product: status %d", st)
	}
	path := "/products/" + strconv.FormatInt(p.ID, 10)
	// The consumers own their partitions before the timed part.
	s.expect(s.call("POST", path+"/likes", "warm-up", nil, nil), http.StatusOK)
	s.waitLikes(p.ID, 1, 60*time.Second)

	conn, err := pgx.Connect(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	type sample struct {
		at           time.Time
		likes, views int64
	}
	var (
		mu              sync.Mutex
		polls, database []sample
		wg              sync.WaitGroup
	)
	// The sale lasts 6 s; the reader goes on 2 s after it ends, when the
	// last events are applied and nothing else would refresh the page.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	sale, endSale := context.WithTimeout(ctx, 6*time.Second)
	defer endSale()
	for w := range 6 { // the sale: each worker likes as new users and views
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; sale.Err() == nil; i++ {
				s.call("POST", path+"/likes", fmt.Sprintf("fan-%d-%d", w, i), nil, nil)
				s.call("GET", path, "shopper", nil, nil)
				time.Sleep(30 * time.Millisecond)
			}
		}()
	}
	wg.Add(2)
	go func() { // the reader
		defer wg.Done()
		for ctx.Err() == nil {
			at := time.Now()
			var body struct{ LikeCount, ViewCount int64 }
			if s.call("GET", path, "", nil, &body) == http.StatusOK {
				mu.Lock()
				polls = append(polls, sample{at, body.LikeCount, body.ViewCount})
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	go func() { // what the database has committed, and when it was seen
		defer wg.Done()
		for ctx.Err() == nil {
			var likes, views int64
			if err := conn.QueryRow(ctx, `SELECT like_count, view_count FROM product_metrics WHERE product_id = $1`, p.ID).Scan(&likes, &views); err == nil {
				database = append(database, sample{time.Now(), likes, views})
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()

	// For each poll: the newest database sample taken at least 1 s before
	// the poll started must be shown; and the staleness is how long before
	// the poll the database first held more than the poll showed.
	var stale []time.Duration
	violations := 0
	for _, q := range polls {
		var staleness time.Duration
		for _, d := range database {
			if d.likes > q.likes || d.views > q.views {
				staleness = max(0, q.at.Sub(d.at))
				if q.at.Sub(d.at) >= time.Second {
					violations++
					if violations <= 5 {
						t.Errorf("a poll at %s showed %d likes and %d views; the database had %d and %d at %s, %v earlier",
							q.at.Format("15:04:05.000"), q.likes, q.views, d.likes, d.views, d.at.Format("15:04:05.000"), q.at.Sub(d.at).Round(time.Millisecond))
					}
				}
				break
			}
		}
		stale = append(stale, staleness)
	}
	if len(polls) < 100 || len(database) < 100 {
		t.Fatalf("%d polls and %d database samples; the test needs more", len(polls), len(database))
	}
	slices.Sort(stale)
	last := database[len(database)-1]
	t.Logf("flash sale: %d likes and %d views committed; %d polls of the cached page: staleness p50 %v, p99 %v, max %v; %d polls 1 s or more stale",
		last.likes, last.views, len(polls), stale[len(stale)/2].Round(time.Millisecond), stale[len(stale)*99/100].Round(time.Millisecond),
		stale[len(stale)-1].Round(time.Millisecond), violations)
}
