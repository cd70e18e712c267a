package deploy_test

import (
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func cmpDiff(want, got any) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}
