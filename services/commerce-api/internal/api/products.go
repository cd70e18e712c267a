package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
)

// Limits of a product's fields. Keeping price and quantities far below
// int64 range means no order total can overflow; the price bound is the one
// the consumers check events against.
const (
	maxNameRunes = 200
	maxPrice     = events.MaxUnitPrice
	maxStock     = 1_000_000_000
	defaultSize  = 20
	maxSize      = 100
)

type productJSON struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Price       int64     `json:"price"`
	Stock       int64     `json:"stock"`
	LikeCount   int64     `json:"likeCount"`
	SalesCount  int64     `json:"salesCount"`
	SalesAmount int64     `json:"salesAmount"`
	ViewCount   int64     `json:"viewCount"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

func toProductJSON(p store.Product) productJSON {
	return productJSON{
		ID: p.ID, Name: p.Name, Price: p.Price, Stock: p.Stock,
		LikeCount: p.LikeCount, SalesCount: p.SalesCount, SalesAmount: p.SalesAmount, ViewCount: p.ViewCount,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}

type productPage struct {
	Items []productJSON `json:"items"`
	Page  int           `json:"page"`
	Size  int           `json:"size"`
	Total int64         `json:"total"`
	// TotalCapped says the catalog holds more than Total (store.ListWindow)
	// products; pages stop at that window.
	TotalCapped bool `json:"totalCapped"`
}

type likeJSON struct {
	ProductID int64 `json:"productId"`
	Liked     bool  `json:"liked"`
}

func (s *server) createProduct(w http.ResponseWriter, r *http.Request) error {
	var errs ValidationError
	o, err := readObject(w, r, &errs)
	if err != nil {
		return err
	}
	var in store.NewProduct
	if o != nil {
		var ok bool
		if in.Name, ok = field[string](o, "name", "a string"); ok {
			if n := utf8.RuneCountInString(in.Name); strings.TrimSpace(in.Name) == "" || n > maxNameRunes {
				errs.add(o.at("name"), "must be 1 to "+itoa(maxNameRunes)+" characters and not blank")
			} else if strings.ContainsFunc(in.Name, unicode.IsControl) {
				errs.add(o.at("name"), "must not contain control characters (NUL, tab, line breaks, U+007F-U+009F)")
			}
		}
		in.Price, _ = intField(o, "price", 0, maxPrice)
		in.Stock, _ = intField(o, "stock", 0, maxStock)
		o.finish()
	}
	if err := errs.check(); err != nil {
		return err
	}
	p, err := s.st.CreateProduct(r.Context(), in)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, toProductJSON(p))
}

// getProduct serves a product's detail and records the view. With a cache,
// a hit skips reading the product but still records the view; a miss fills
// the cache only if no invalidation came while the database was read.
func (s *server) getProduct(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	viewer, err := s.actor(r, false)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var seen productcache.Entry
	if s.cache != nil {
		cctx, cancel := context.WithTimeout(ctx, cacheTimeout)
		seen, err = s.cache.Get(cctx, id)
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "product cache read failed", "product", id, logkey.Err, err)
		}
		if seen.Hit {
			if err := s.st.RecordView(ctx, id, viewer); err != nil {
				return err
			}
			writeBody(w, http.StatusOK, seen.Body)
			return nil
		}
	}
	p, err := s.st.ViewProduct(ctx, id, viewer)
	if err != nil {
		return err
	}
	body, err := json.Marshal(toProductJSON(p))
	if err != nil {
		return err
	}
	if s.cache != nil {
		cctx, cancel := context.WithTimeout(ctx, cacheTimeout)
		if _, err := s.cache.Fill(cctx, id, seen, body); err != nil {
			s.log.WarnContext(ctx, "product cache write failed", "product", id, logkey.Err, err)
		}
		cancel()
	}
	writeBody(w, http.StatusOK, body)
	return nil
}

func (s *server) listProducts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var errs ValidationError
	// Absent is the default order; present, it must be one of the orders,
	// once: `sort=` names none, and is refused like any other unknown one.
	sort := store.SortLatest
	if vals, ok := q["sort"]; ok {
		known := false
		var names []string
		for _, k := range store.ProductSorts() {
			known = known || len(vals) == 1 && k == store.ProductSort(vals[0])
			names = append(names, string(k))
		}
		if known {
			sort = store.ProductSort(vals[0])
		} else {
			errs.add("sort", "must be one of "+strings.Join(names, ", ")+", once")
		}
	}
	page := queryInt(q, "page", 0, 0, store.ListWindow, &errs)
	// A size above the cap is served at the cap rather than refused.
	size := min(queryInt(q, "size", defaultSize, 1, 1<<31-1, &errs), maxSize)
	if page*size > store.ListWindow {
		errs.add("page", "page × size must be at most "+itoa(store.ListWindow)+"; the listing stops there")
	}
	if err := errs.check(); err != nil {
		return err
	}
	items, total, capped, err := s.st.ListProducts(r.Context(), sort, page, size)
	if err != nil {
		return err
	}
	out := productPage{Items: make([]productJSON, len(items)), Page: page, Size: size, Total: total, TotalCapped: capped}
	for i, p := range items {
		out.Items[i] = toProductJSON(p)
	}
	return writeJSON(w, http.StatusOK, out)
}

// queryInt reads the query parameter name, a canonical decimal integer
// within [lo, hi], or def when it is absent. Repeating it is an error too.
func queryInt(q url.Values, name string, def, lo, hi int, errs *ValidationError) int {
	vals, ok := q[name]
	if !ok {
		return def
	}
	n, valid := int64(0), len(vals) == 1
	if valid {
		n, valid = parseCanonical(vals[0])
	}
	if !valid || n < int64(lo) || n > int64(hi) {
		errs.add(name, "must be one integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi)+", without sign or leading zeros")
		return def
	}
	return int(n)
}

func (s *server) like(w http.ResponseWriter, r *http.Request) error {
	return s.setLike(w, r, true, s.st.Like)
}

func (s *server) unlike(w http.ResponseWriter, r *http.Request) error {
	return s.setLike(w, r, false, s.st.Unlike)
}

func (s *server) setLike(w http.ResponseWriter, r *http.Request, liked bool,
	change func(ctx context.Context, user string, product int64) (bool, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	u, err := s.actor(r, true)
	if err != nil {
		return err
	}
	// The cached product page needs no invalidation here: a like changes
	// only the likes table, and like_count, which the page shows, changes
	// when the like consumer applies the event, which invalidates it then.
	if _, err := change(r.Context(), u, id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, likeJSON{ProductID: id, Liked: liked})
}
