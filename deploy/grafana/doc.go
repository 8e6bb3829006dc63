// Package grafana holds the gateway's Grafana dashboard (infergate.json) and the test that keeps
// it honest: the test starts a gateway in process, sends it one request of every kind the
// dashboard shows, scrapes its /metrics and fails when a query names a metric the gateway does
// not expose (a renamed or removed metric would otherwise leave a panel silently empty), or when
// most of what it exposes has no panel. There is no Go code here besides the test; see README.md
// for importing the dashboard.
package grafana
