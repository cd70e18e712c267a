package pcon_test

import (
	"testing"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/core"
)

// TestErrKeyIsTheServices: pcon's records carry their errors under the key
// the services use, so that one query over the logs finds every error.
func TestErrKeyIsTheServices(t *testing.T) {
	t.Parallel()
	if core.ErrKey != logkey.Err {
		t.Errorf("pcon logs errors under %q, the services under %q", core.ErrKey, logkey.Err)
	}
}
