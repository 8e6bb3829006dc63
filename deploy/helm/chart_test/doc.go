// Package charttest holds the test of the Helm chart in ../infergate: it lints the chart, renders
// it with its default values and each example, decodes every rendered object strictly into its
// Kubernetes type, and parses each rendered config file with the gateway's own parser.
//
// It is a module of its own so that the gateway's module does not take Helm's and Kubernetes'
// dependencies: (cd deploy/helm/chart_test && go test ./...).
package charttest
