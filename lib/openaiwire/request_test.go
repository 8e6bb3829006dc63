package openaiwire

import "testing"

func TestIncludeUsage(t *testing.T) {
	for in, want := range map[string]bool{
		`{"include_usage":true}`:                               true,
		`{"Include_Usage":true}`:                               true, // encoding/json folds case
		`{"include_usage":false}`:                              false,
		`{"include_usage":"true"}`:                             false,
		`{"include_usage":true,"continuous_usage_stats":true}`: true,
		`{"include_usage":true`:                                false, // malformed
		`null`:                                                 false,
		``:                                                     false,
	} {
		if got := IncludeUsage([]byte(in)); got != want {
			t.Errorf("IncludeUsage(%s) = %v, want %v", in, got, want)
		}
	}
}
