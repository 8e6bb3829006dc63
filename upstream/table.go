package upstream

import "slices"

// Table is a pool's route table: each public model name and the routes that serve it.
type Table[R Route] struct {
	// Routes are each name's routes, highest priority first; equal priorities keep the order of
	// the endpoints given to BuildTable.
	Routes map[string][]R
	// Names are the public names, sorted.
	Names []string
}

// BuildTable builds the route table of eps. served returns an endpoint's models by the name it
// knows each by (nil: none known yet) and its aliases (public name -> that name); route makes the
// route of one public name to an endpoint's model. An endpoint serves each of its models under its
// own name, and under each alias whose target it serves that none of its own models shadows.
func BuildTable[E any, M any, R Route](eps []E, served func(e E) (models map[string]M, aliases map[string]string),
	route func(e E, public, upstream string, m M) R) *Table[R] {
	t := &Table[R]{Routes: map[string][]R{}}
	for _, e := range eps {
		models, aliases := served(e)
		if models == nil {
			continue
		}
		for name, m := range models {
			t.Routes[name] = append(t.Routes[name], route(e, name, name, m))
		}
		for alias, target := range aliases {
			if m, ok := models[target]; ok {
				if _, shadowed := models[alias]; !shadowed {
					t.Routes[alias] = append(t.Routes[alias], route(e, alias, target, m))
				}
			}
		}
	}
	t.Names = make([]string, 0, len(t.Routes))
	for name, rs := range t.Routes {
		slices.SortStableFunc(rs, func(a, b R) int { return b.State().cfg.Priority - a.State().cfg.Priority })
		t.Names = append(t.Names, name)
	}
	slices.Sort(t.Names)
	return t
}
