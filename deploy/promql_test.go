package deploy_test

import (
	"slices"
	"strings"
	"testing"
)

// promqlAggregations and promqlKeywords are the PromQL words that are not
// metric names even without a following parenthesis.
var promqlAggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// labelListWords introduce a parenthesised list of label names.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// promqlRefs lists the metric names and the label names a PromQL expression
// refers to. It is a lexer, not a parser: enough for the expressions a
// dashboard holds (selectors, functions, aggregations, binary operators).
func promqlRefs(expr string) (metrics, labels []string) {
	add := func(s *[]string, v string) {
		if !slices.Contains(*s, v) {
			*s = append(*s, v)
		}
	}
	skipSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\n' || expr[i] == '\t') {
			i++
		}
		return i
	}
	skipString := func(i int) int {
		q := expr[i]
		for i++; i < len(expr) && expr[i] != q; i++ {
			if expr[i] == '\\' {
				i++
			}
		}
		return i + 1
	}
	ident := func(i int) (string, int) {
		j := i
		for j < len(expr) && isIdentChar(expr[j]) {
			j++
		}
		return expr[i:j], j
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '[':
			i = strings.IndexByte(expr[i:], ']') + i + 1
		case c == '{':
			// Matchers: name op "value", ...
			for i++; i < len(expr) && expr[i] != '}'; {
				switch {
				case expr[i] == '"' || expr[i] == '\'' || expr[i] == '`':
					i = skipString(i)
				case isIdentStart(expr[i]):
					var name string
					name, i = ident(i)
					add(&labels, name)
				default:
					i++
				}
			}
			i++
		case c >= '0' && c <= '9' || c == '.':
			// A number, or a duration such as 5m: letters belong to it.
			for i < len(expr) && (isIdentChar(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			var word string
			word, i = ident(i)
			j := skipSpace(i)
			switch {
			case labelListWords[word] && j < len(expr) && expr[j] == '(':
				end := strings.IndexByte(expr[j:], ')') + j
				for _, l := range strings.Split(expr[j+1:end], ",") {
					if l = strings.TrimSpace(l); l != "" {
						add(&labels, l)
					}
				}
				i = end + 1
			case j < len(expr) && expr[j] == '(', promqlKeywords[word], promqlAggregations[word]:
			default:
				add(&metrics, word)
			}
		default:
			i++
		}
	}
	return metrics, labels
}

func TestPromqlRefs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		expr           string
		metrics, label []string
	}{
		{"bare", "up", []string{"up"}, nil},
		{"selector", `pcon_true_lag{group=~"$group", topic!="a,b"}`, []string{"pcon_true_lag"}, []string{"group", "topic"}},
		{"aggregation and range", `sum by (route, status) (rate(http_requests_total[1m]))`, []string{"http_requests_total"}, []string{"route", "status"}},
		{"quantile", `histogram_quantile(0.95, sum by (le) (rate(x_bucket{a="1"}[5m])))`, []string{"x_bucket"}, []string{"le", "a"}},
		{"binary with numbers", `sum(rate(a_total[5m])) / clamp_min(sum(rate(b_total[5m])), 1e-9) * 100`, []string{"a_total", "b_total"}, nil},
		{"vector matching", `a / on (group) group_left (topic) b offset 5m`, []string{"a", "b"}, []string{"group", "topic"}},
		{"aggregation after", `max(c) without (instance)`, []string{"c"}, []string{"instance"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, l := promqlRefs(tc.expr)
			if diff := cmpDiff(tc.metrics, m); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if diff := cmpDiff(tc.label, l); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}
