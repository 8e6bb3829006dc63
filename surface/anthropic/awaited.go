package anthropic

import (
	"slices"
	"strings"
)

// awaited are the tool_use ids of an assistant turn that the next turn's tool_result blocks must
// answer, in the turn's order; an id used twice needs two results, and a result answers the
// first use of its id not yet answered.
type awaited struct {
	ids  []string // a small turn's answered ids are "" (an id is never empty)
	left int      // not yet answered

	// A turn of many calls is searched through its ids sorted, by id and then position: a result
	// costs a binary search, not a scan of the turn (50,000 calls answered in reverse order took
	// 3.6 s of scanning and shifting). taken counts, at the first of each id's run in sorted, the
	// uses of that id answered.
	sorted []int32
	taken  []int32
}

// linearAwaited is the most ids searched one by one.
const linearAwaited = 16

func awaiting(ids []string) awaited { return awaited{ids: ids, left: len(ids)} }

// answer marks the first unanswered use of id answered; false when there is none.
func (a *awaited) answer(id string) bool {
	if id == "" || a.left == 0 {
		return false
	}
	if len(a.ids) <= linearAwaited {
		for k, s := range a.ids {
			if s == id {
				a.ids[k] = ""
				a.left--
				return true
			}
		}
		return false
	}
	if a.sorted == nil {
		a.sorted = make([]int32, len(a.ids))
		for k := range a.sorted {
			a.sorted[k] = int32(k)
		}
		slices.SortFunc(a.sorted, func(x, y int32) int {
			if c := strings.Compare(a.ids[x], a.ids[y]); c != 0 {
				return c
			}
			return int(x - y)
		})
		a.taken = make([]int32, len(a.ids))
	}
	first, found := slices.BinarySearchFunc(a.sorted, id, func(k int32, id string) int {
		return strings.Compare(a.ids[k], id)
	})
	if !found {
		return false
	}
	next := first + int(a.taken[first])
	if next == len(a.sorted) || a.ids[a.sorted[next]] != id {
		return false // every use of id is answered
	}
	a.taken[first]++
	a.left--
	return true
}

// unanswered lists the ids not yet answered, in the turn's order.
func (a *awaited) unanswered() []string {
	if a.sorted == nil {
		out := make([]string, 0, a.left)
		for _, s := range a.ids {
			if s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	answered := make([]bool, len(a.ids))
	for m := 0; m < len(a.sorted); m++ {
		if m == 0 || a.ids[a.sorted[m]] != a.ids[a.sorted[m-1]] {
			for r := range int(a.taken[m]) {
				answered[a.sorted[m+r]] = true
			}
		}
	}
	out := make([]string, 0, a.left)
	for k, s := range a.ids {
		if !answered[k] {
			out = append(out, s)
		}
	}
	return out
}
