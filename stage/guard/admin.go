package guard

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"time"
)

// AdminHandler serves GET /admin/guard: the load shedder's load, every endpoint's circuit
// breaker state and the recently used rate-limit buckets with what they have left. Mount it
// behind Auth, which lets only admin keys through. endpoints lists the endpoints whose breakers
// it shows.
func (g *Guard) AdminHandler(endpoints func() []string) http.Handler {
	type breakerState struct {
		Endpoint string `json:"endpoint"`
		State    string `json:"state"`
	}
	type bucket struct {
		Bucket     string  `json:"bucket"`
		Limit      float64 `json:"limit"`
		Remaining  float64 `json:"remaining"`
		ResetAfter string  `json:"reset_after"`
		LastUsed   string  `json:"last_used"`
	}
	type shedding struct {
		InFlight int `json:"in_flight"`
		Batch    int `json:"batch"`
		Waiting  int `json:"waiting"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := g.opts.Shedder.Stats()
		out := struct {
			Shedding shedding       `json:"shedding"`
			Breakers []breakerState `json:"breakers"`
			Buckets  []bucket       `json:"buckets"`
		}{Shedding: shedding{st.InFlight, st.Batch, st.Waiting}, Breakers: []breakerState{}, Buckets: []bucket{}}
		if g.opts.Breaker != nil && endpoints != nil {
			names := endpoints()
			slices.Sort(names)
			for _, n := range names {
				out.Breakers = append(out.Breakers, breakerState{n, g.opts.Breaker.State(n).String()})
			}
		}
		now := time.Now()
		for i := range g.tracked {
			s := &g.tracked[i]
			s.Lock()
			for k, u := range s.buckets {
				// The bucket refilled since its last decision, at its rate, up to its burst.
				left := math.Min(u.d.Limit.Burst, u.d.Remaining+now.Sub(u.used).Seconds()*u.d.Limit.Rate)
				reset := max(0, u.d.ResetAfter-now.Sub(u.used))
				out.Buckets = append(out.Buckets, bucket{k, u.d.Limit.Burst, math.Floor(left), reset.Round(time.Second).String(), u.used.UTC().Format(time.RFC3339)})
			}
			s.Unlock()
		}
		slices.SortFunc(out.Buckets, func(a, b bucket) int {
			if a.Bucket < b.Bucket {
				return -1
			}
			return 1
		})
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
}
