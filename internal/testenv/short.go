package testenv

import "testing"

// Needs marks t as needing what (a service or a program outside Go:
// PostgreSQL, Redis, Apache Kafka, a browser, promtool). Under
// `go test -short`, the fast tier a newcomer runs with nothing installed, it
// skips t saying so; otherwise it does nothing, and a missing service fails
// the test where the test reaches it. `make test` never passes -short, so
// there every test runs. Every helper of this package that reaches such a
// service calls it, so that the tier is decided here, in one place.
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped under -short (make test runs it)", what)
	}
}

// What the helpers need, as Needs names it.
const (
	needsPostgres = "PostgreSQL"
	needsRedis    = "Redis"
	needsKafka    = "Apache Kafka (a JVM, its jars from Maven Central)"
)
