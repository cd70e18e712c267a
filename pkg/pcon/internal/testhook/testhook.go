// Package testhook gives pcon's tests outside package pcon (those against
// Apache Kafka, in the module of pkg/pcon/internal/repotest) the levers on
// a Consumer that package pcon's own tests could reach directly. Package
// pcon sets its variables when it is initialised; only tests call them.
package testhook

// ShareWorkers, given a *pcon.Consumer that has not run yet, makes its
// RecordHandler engine share workers among records, as it does on its own
// for fast handlers, so that tests hold that mode to pcon's guarantees
// whatever their handlers take.
var ShareWorkers func(consumer any)
