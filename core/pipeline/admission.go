package pipeline

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// Admission decides whether a request may go on now (the guard: API key limits, rate limits,
// load shedding). It returns what to proceed with, or an error that refuses the request: an
// *Error chooses the answer (status, OpenAI error object, headers such as Retry-After); any other
// error is a 500.
type Admission func(ctx context.Context, req *Request) (Admitted, error)

// Admitted is an admitted request.
type Admitted struct {
	// Context is what the request proceeds with (nil: the request's own).
	Context context.Context
	// Header is added to the response for the client (X-RateLimit-*).
	Header http.Header
	// Done, when set, is called once when the request ended, with what it used (zero when it
	// never reached an upstream).
	Done func(Usage)
}

// Refused is an Admission's refusal, as Admit returns it: Err is the *Error to answer with.
type Refused struct{ Err *Error }

func (r *Refused) Error() string { return r.Err.Message }
func (r *Refused) Unwrap() error { return r.Err }

// Admit is the interceptor that asks a before the request goes on: a refusal is returned as a
// *Refused (which unwraps to the *Error to answer with), so a surface can count refusals apart
// from failures further in. An admitted request's Done runs when its response body is finished,
// or at once when next fails.
func Admit(a Admission) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, req *Request) (*Response, error) {
			adm, err := a(ctx, req)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					e = ServerError(http.StatusInternalServerError, "", err.Error())
				}
				return nil, &Refused{e}
			}
			if adm.Context != nil {
				ctx = adm.Context
			}
			res, err := next(ctx, req)
			if err != nil {
				if adm.Done != nil {
					adm.Done(Usage{})
				}
				return nil, err
			}
			if len(adm.Header) > 0 {
				if res.GatewayHeader == nil {
					res.GatewayHeader = adm.Header
				} else {
					for k, vv := range adm.Header {
						res.GatewayHeader[k] = vv
					}
				}
			}
			if adm.Done != nil {
				res.Body = &doneBody{Body: res.Body, done: adm.Done}
			}
			return res, nil
		}
	}
}

// doneBody calls done with the usage when the body is finished.
type doneBody struct {
	Body
	done func(Usage)
	once sync.Once
}

func (d *doneBody) Finish(clientErr error) Usage {
	u := d.Body.Finish(clientErr)
	d.once.Do(func() { d.done(u) })
	return u
}
