package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/stretchr/testify/assert"
)

// tableStatuses are the statuses the table is printed for: every error status Go names, and a few
// odd ones (no error, nginx's 499, past the named ones, past 5xx).
func tableStatuses() []int {
	out := []int{0, 200, 301}
	for s := 400; s < 600; s++ {
		if http.StatusText(s) != "" || s == 499 || s == 599 {
			out = append(out, s)
		}
	}
	return append(out, 600, 999)
}

// TestCodeTable checks the whole table at once: for each status, its code on each RPC surface,
// and the HTTP status KServe REST answers for the KServe code.
func TestCodeTable(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-20s %-20s %s\n", "status", httpapi.OpenAIService, httpapi.KServe, "KServe REST")
	for _, s := range tableStatuses() {
		k := httpapi.Code(httpapi.KServe, s)
		fmt.Fprintf(&b, "%-6d %-20s %-20s %d\n", s, httpapi.Code(httpapi.OpenAIService, s), k, httpapi.RESTStatus(k))
	}
	assert.Equal(t, wantTable, b.String())
}

const wantTable = `status OpenAIService        KServe               KServe REST
0      unknown              internal             500
200    unknown              internal             500
301    unknown              internal             500
400    invalid_argument     invalid_argument     400
401    unauthenticated      unauthenticated      401
402    invalid_argument     invalid_argument     400
403    permission_denied    permission_denied    403
404    not_found            not_found            404
405    invalid_argument     invalid_argument     400
406    invalid_argument     invalid_argument     400
407    invalid_argument     invalid_argument     400
408    deadline_exceeded    invalid_argument     400
409    aborted              invalid_argument     400
410    invalid_argument     invalid_argument     400
411    invalid_argument     invalid_argument     400
412    invalid_argument     invalid_argument     400
413    resource_exhausted   invalid_argument     400
414    invalid_argument     invalid_argument     400
415    invalid_argument     invalid_argument     400
416    invalid_argument     invalid_argument     400
417    invalid_argument     invalid_argument     400
418    invalid_argument     invalid_argument     400
421    invalid_argument     invalid_argument     400
422    invalid_argument     invalid_argument     400
423    invalid_argument     invalid_argument     400
424    invalid_argument     invalid_argument     400
425    invalid_argument     invalid_argument     400
426    invalid_argument     invalid_argument     400
428    invalid_argument     invalid_argument     400
429    resource_exhausted   unavailable          503
431    invalid_argument     invalid_argument     400
451    invalid_argument     invalid_argument     400
499    invalid_argument     invalid_argument     400
500    internal             internal             500
501    unimplemented        internal             500
502    unavailable          unavailable          503
503    unavailable          unavailable          503
504    unavailable          unavailable          503
505    internal             internal             500
506    internal             internal             500
507    internal             internal             500
508    internal             internal             500
510    internal             internal             500
511    internal             internal             500
599    internal             internal             500
600    internal             internal             500
999    internal             internal             500
`

// TestRESTStatus checks the code -> HTTP status table of KServe REST and the guard's refusals.
func TestRESTStatus(t *testing.T) {
	var b strings.Builder
	for c := connect.Code(0); c <= connect.CodeUnauthenticated+1; c++ {
		fmt.Fprintf(&b, "%-20s %d\n", c, httpapi.RESTStatus(c))
	}
	assert.Equal(t, wantREST, b.String())
}

const wantREST = `code_0               400
canceled             400
unknown              400
invalid_argument     400
deadline_exceeded    400
not_found            404
already_exists       400
permission_denied    403
resource_exhausted   429
failed_precondition  400
aborted              400
out_of_range         400
unimplemented        501
internal             500
unavailable          503
data_loss            400
unauthenticated      401
code_17              400
`
