package ollaconfig

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

var typeOfConfig = reflect.TypeFor[ollaConfig]()

// checkKeys reports every key of node that Olla's config has no field for, by its path, so a
// misspelt key is an error rather than a setting silently lost (Olla itself ignores it).
func checkKeys(node *yaml.Node, t reflect.Type, at string) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var errs []error
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			return nil // a type mismatch; Decode reports it with its line
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			f, ok := fieldByTag(t, k.Value)
			p := join(at, k.Value)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: line %d: unknown key (not an Olla setting)", p, k.Line))
				continue
			}
			errs = append(errs, checkKeys(v, f.Type, p)...)
		}
	case reflect.Slice:
		if node.Kind != yaml.SequenceNode {
			return nil
		}
		for i, v := range node.Content {
			errs = append(errs, checkKeys(v, t.Elem(), fmt.Sprintf("%s[%d]", at, i))...)
		}
	case reflect.Map:
		if node.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(node.Content); i += 2 {
			errs = append(errs, checkKeys(node.Content[i+1], t.Elem(), join(at, node.Content[i].Value))...)
		}
	}
	return errs
}

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

// settingNotes adds a note for each setting in the file outside the endpoints and aliases
// (which convert() handles), in file order.
func (c *converter) settingNotes(node *yaml.Node, at string) {
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		p := join(at, k.Value)
		if p == "discovery.static.endpoints" || p == "model_aliases" {
			continue
		}
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
			c.settingNotes(v, p)
			continue
		}
		if n := explain(p, v); n != "" {
			c.note("%s: %s: %s", p, show(v), n)
		}
	}
}

// show writes a setting's value for a note, shortened.
func show(v *yaml.Node) string {
	var s string
	switch v.Kind {
	case yaml.ScalarNode:
		s = v.Value
	case yaml.SequenceNode:
		parts := make([]string, 0, len(v.Content))
		for _, e := range v.Content {
			parts = append(parts, show(e))
		}
		s = "[" + strings.Join(parts, ", ") + "]"
	case yaml.MappingNode:
		s = "{}"
	default:
		s = "(" + v.Tag + ")"
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// explain says what became of one Olla setting; "" when it converts exactly and needs no note.
func explain(p string, v *yaml.Node) string {
	switch p {
	case "server.idle_timeout":
		return "" // converted: server.idle_timeout
	case "server.host", "server.port":
		return "infergate takes its address from -listen (see Result.Listen / the header comment)"
	case "server.shutdown_timeout":
		return "infergate's -drain-timeout flag (default 30s) bounds its shutdown: not converted"
	case "server.read_header_timeout":
		return "approximated by infergate's server.first_byte_timeout (default 10s: a new connection's first request must begin by then): not converted"
	case "server.read_timeout", "server.write_timeout":
		return "no counterpart: infergate bounds connections by server.first_byte_timeout and server.idle_timeout, never a whole request (streams may run long)"
	case "server.request_logging":
		return "no counterpart: infergate logs through -log-level"
	case "server.request_limits.max_body_size":
		return "infergate bounds request bodies with its -max-message-bytes flag: not converted"
	case "server.request_limits.max_header_size":
		return "no counterpart: infergate keeps its own header limits"
	case "proxy.load_balancer":
		switch v.Value {
		case "round-robin":
			return "infergate's routing is per model (models.<name>.routing: round_robin); converted as its default, least_outstanding inside the highest healthy priority tier"
		case "priority":
			return "infergate serves from the highest healthy priority tier; inside a tier it picks the endpoint with the fewest requests in flight (Olla: weighted random by health)"
		default:
			return "infergate's default (least_outstanding) picks the endpoint with the fewest requests in flight, as Olla's least-connections does"
		}
	case "proxy.engine", "proxy.profile", "proxy.stream_buffer_size":
		return "no counterpart: infergate has one proxy, which streams each chunk as it arrives (upstream_client: fast|std picks its HTTP client)"
	case "proxy.max_retries", "proxy.retry_backoff":
		return "deprecated in Olla; infergate retries failed connections on the next endpoint itself"
	case "model_registry.routing_strategy.type":
		if v.Value == "strict" {
			return "infergate routes strictly too: a model no endpoint lists is a 404"
		}
		return "no counterpart: infergate routes only to endpoints listing the model (Olla's strict)"
	case "logging.level":
		return "infergate's -log-level flag: not converted"
	case "logging.format":
		return "infergate logs text, or JSON with -log-json: not converted"
	case "logging.output":
		return "infergate logs to stderr"
	}
	for _, e := range prefixNotes {
		if p == e.prefix || strings.HasPrefix(p, e.prefix+".") {
			return e.note
		}
	}
	return "no counterpart in infergate: ignored"
}

var prefixNotes = []struct{ prefix, note string }{
	{"server.cors", "no counterpart: infergate sends no CORS headers (put a reverse proxy in front for browser clients)"},
	{"server.rate_limits", "no counterpart: infergate limits requests and tokens per API key, model and route (limits.*), not per client IP"},
	{"proxy.sticky_sessions", "no counterpart; closest: models.<name>.routing: cache_aware (prompt-prefix affinity) and chat sessions"},
	{"proxy.retry", "infergate always retries a failed connection on the next endpoint, and cuts off failing endpoints with its breaker (breaker.*)"},
	{"proxy.profile_filter", "no counterpart: infergate has no profiles"},
	{"proxy", "no counterpart: infergate's upstream client has its own timeouts (a response may stream as long as it needs)"},
	{"discovery.model_discovery", "no counterpart: infergate lists each endpoint's models (model_url) as part of its health loop; skip_discovery turns it off per endpoint"},
	{"discovery", "no counterpart: infergate checks each endpoint on its own check_interval, with backoff"},
	{"model_registry", "no counterpart: infergate keeps one route table per model name across all upstreams"},
	{"translators", "no counterpart in the config: infergate's Anthropic Messages API is not configured here"},
	{"dashboard", "no counterpart: infergate has no dashboard (state is in /metrics and response headers)"},
	{"engineering", "no counterpart in infergate: ignored"},
}
