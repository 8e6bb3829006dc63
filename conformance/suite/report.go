package suite

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints the report as a table grouped by check group, then the summary line. With
// color, outcomes are coloured with ANSI escapes (for terminals).
func (r *Report) WriteTable(w io.Writer, color bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KServe v2 conformance of %s", r.GRPCAddr)
	if r.HTTPURL != "" {
		fmt.Fprintf(tw, " and %s", r.HTTPURL)
	}
	if r.ServerName != "" {
		fmt.Fprintf(tw, " (%s %s)", r.ServerName, r.ServerVersion)
	}
	fmt.Fprintln(tw)
	group := ""
	for _, res := range r.Results {
		if res.Group != group {
			group = res.Group
			fmt.Fprintf(tw, "\n%s\n", strings.ToUpper(group))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", paint(res.Outcome, color), res.ID, res.Class, res.Title)
		if d := res.detail(); d != "" {
			fmt.Fprintf(tw, "  \t\t\t%s\n", d)
		}
		if res.Outcome == Fail && res.Citation.Text != "" {
			// What the server is held to, so that a failure can be judged without the source.
			fmt.Fprintf(tw, "  \t\t\tper %s\n", oneLine(res.Citation.String()))
		}
	}
	fmt.Fprintf(tw, "\n%s in %s\n", r.Summary, r.Elapsed.Round(time.Millisecond))
	return tw.Flush()
}

// detail is the line under a result: why it failed, warned or skipped.
func (res Result) detail() string {
	var parts []string
	if res.Outcome == Pass {
		return ""
	}
	if res.Message != "" {
		parts = append(parts, oneLine(res.Message))
	}
	if res.Expect != "" || res.Got != "" {
		parts = append(parts, fmt.Sprintf("expected %s, got %s", oneLine(res.Expect), oneLine(res.Got)))
	}
	return strings.Join(parts, "; ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func paint(o Outcome, color bool) string {
	label := strings.ToUpper(string(o))
	if !color {
		return label
	}
	codes := map[Outcome]string{Pass: "32", Fail: "31;1", Warn: "33", Skip: "90"}
	return "\x1b[" + codes[o] + "m" + label + "\x1b[0m"
}

// WriteJSON writes the whole report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteJUnit writes the report in JUnit XML, one test suite per check group, so CI systems can
// show it. Warnings pass, with the divergence in system-out.
func (r *Report) WriteJUnit(w io.Writer) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type property struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	type testcase struct {
		Name       string     `xml:"name,attr"`
		Classname  string     `xml:"classname,attr"`
		Time       float64    `xml:"time,attr"`
		Properties []property `xml:"properties>property,omitempty"`
		Failure    *failure   `xml:"failure,omitempty"`
		Skipped    *skipped   `xml:"skipped,omitempty"`
		SystemOut  string     `xml:"system-out,omitempty"`
	}
	type testsuite struct {
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     float64    `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	type testsuites struct {
		XMLName  xml.Name    `xml:"testsuites"`
		Name     string      `xml:"name,attr"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Skipped  int         `xml:"skipped,attr"`
		Time     float64     `xml:"time,attr"`
		Suites   []testsuite `xml:"testsuite"`
	}
	out := testsuites{Name: "kserve-v2-conformance " + r.GRPCAddr, Time: r.Elapsed.Seconds()}
	index := map[string]int{}
	for _, res := range r.Results {
		i, ok := index[res.Group]
		if !ok {
			i = len(out.Suites)
			index[res.Group] = i
			out.Suites = append(out.Suites, testsuite{Name: res.Group})
		}
		s := &out.Suites[i]
		c := testcase{Name: res.ID + ": " + res.Title, Classname: "conformance." + res.Group, Time: res.Elapsed.Seconds(),
			Properties: []property{{"class", string(res.Class)}, {"citation", res.Citation.Text}, {"citation_source", res.Citation.Source}}}
		switch res.Outcome {
		case Fail:
			c.Failure = &failure{Message: res.detail(), Text: fmt.Sprintf("class %s\n%s\nper %s", res.Class, res.detail(), res.Citation)}
			s.Failures++
			out.Failures++
		case Skip:
			c.Skipped = &skipped{Message: res.Message}
			s.Skipped++
			out.Skipped++
		case Warn:
			c.SystemOut = "WARN: " + res.detail()
		}
		s.Cases = append(s.Cases, c)
		s.Tests++
		s.Time += res.Elapsed.Seconds()
		out.Tests++
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
