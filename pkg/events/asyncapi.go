package events

import (
	"bytes"
	_ "embed"
)

//go:embed asyncapi.yaml
var asyncAPI []byte

// AsyncAPI returns the AsyncAPI 3.0 document (YAML) of the event topics:
// their channels and keys, the CloudEvents headers, the payload schemas and
// the dead-letter and parked records. It is the wire contract that the
// registry's types follow; each call returns a fresh copy.
func AsyncAPI() []byte { return bytes.Clone(asyncAPI) }
