// Package productcache names the Redis entries that cache product details.
// commerce-api fills them (cache-aside) and product-consumers deletes them when
// a product's stock runs out, so both must agree on the key.
package productcache

import "strconv"

// Key is the Redis key of the cached detail of product id.
func Key(id int64) string { return "product:" + strconv.FormatInt(id, 10) }
