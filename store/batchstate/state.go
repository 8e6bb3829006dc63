// Package batchstate keeps the state of OpenAI batches: each batch's object (status, timestamps,
// errors, metadata) and the result of every line, stored at most once per (batch, custom_id) so a
// redelivered line never yields a second output line. Two implementations of one Store: in-process
// (the default) and Redis, shared by every gateway replica and batch worker; both pass the contract
// test suite of package batchstatetest, which a new implementation runs too.
package batchstate

import (
	"context"
	"errors"
)

// Status is a batch's state, named as OpenAI names it.
type Status string

// The statuses of OpenAI's batch state machine.
const (
	Validating Status = "validating"
	Failed     Status = "failed"
	InProgress Status = "in_progress"
	Finalizing Status = "finalizing"
	Completed  Status = "completed"
	Expired    Status = "expired"
	Cancelling Status = "cancelling"
	Cancelled  Status = "cancelled"
)

// Terminal reports whether no line of a batch in this state runs any more and its files are final.
func (s Status) Terminal() bool {
	switch s {
	case Failed, Completed, Expired, Cancelled:
		return true
	}
	return false
}

// Accepting reports whether results of a batch in this state are still recorded.
func (s Status) Accepting() bool {
	switch s {
	case InProgress, Cancelling, Finalizing:
		return true
	}
	return false
}

// Counts are a batch's line counts. Completed and Failed are OpenAI's request_counts; Skipped
// counts lines that never ran because the batch was cancelled or expired first.
type Counts struct {
	Total     int64 `json:"total"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	Skipped   int64 `json:"skipped,omitempty"`
}

// Done reports whether every line has a result.
func (c Counts) Done() bool { return c.Total > 0 && c.Completed+c.Failed+c.Skipped >= c.Total }

// ErrorEntry is one entry of a batch's errors list (a validation failure, line-numbered).
type ErrorEntry struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// Batch is a batch's stored object. The JSON of its exported fields is what stores keep; the
// HTTP layer renders OpenAI's batch object from it.
type Batch struct {
	ID               string            `json:"id"`
	Endpoint         string            `json:"endpoint"`
	Model            string            `json:"model,omitempty"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           Status            `json:"status"`
	OutputFileID     string            `json:"output_file_id,omitempty"`
	ErrorFileID      string            `json:"error_file_id,omitempty"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     int64             `json:"in_progress_at,omitempty"`
	ExpiresAt        int64             `json:"expires_at,omitempty"`
	FinalizingAt     int64             `json:"finalizing_at,omitempty"`
	CompletedAt      int64             `json:"completed_at,omitempty"`
	FailedAt         int64             `json:"failed_at,omitempty"`
	ExpiredAt        int64             `json:"expired_at,omitempty"`
	CancellingAt     int64             `json:"cancelling_at,omitempty"`
	CancelledAt      int64             `json:"cancelled_at,omitempty"`
	Errors           []ErrorEntry      `json:"errors,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`

	// Owner names the API key that created the batch ("" with API keys off): only it (and admin
	// keys) sees the batch, and its lines run as that key, under its rate limits. OwnerModels is
	// the key's model allow-list when the batch was created (empty: every model).
	Owner       string   `json:"owner,omitempty"`
	OwnerModels []string `json:"owner_models,omitempty"`

	// Counts are kept by the store: Record moves them; Get and List fill them in. Total is set
	// when the batch is dispatched (Update may set it; Update never changes the others).
	Counts Counts `json:"counts"`

	// Dispatched is set once every line of the batch was published to the bus; until then a
	// replica whose claim expired dispatches it again (lines already recorded are not run twice).
	Dispatched bool `json:"dispatched,omitempty"`

	// Claim is the replica that owns the batch's next step (validating and dispatching it, or
	// assembling its files), as its id and a deadline in Unix ms, so exactly one replica does it
	// and another takes over if it dies.
	Claim      string `json:"claim,omitempty"`
	ClaimUntil int64  `json:"claim_until,omitempty"`
}

// ResultKind says which file a line's result goes to.
type ResultKind uint8

// Result kinds.
const (
	// Output: the request ran and the upstream answered 2xx; the line goes to the output file.
	Output ResultKind = iota + 1
	// Error: the request failed (an error status, or no answer after retries); error file.
	Error
	// Skipped: the line never ran (batch cancelled or expired); it is in neither file.
	Skipped
)

// Result is one line's result.
type Result struct {
	CustomID string
	Kind     ResultKind
	// Line is the JSONL line for the output or error file, without its newline; empty for Skipped.
	Line []byte
}

// Errors of stores.
var (
	ErrNotFound = errors.New("batchstate: no such batch")
	ErrExists   = errors.New("batchstate: batch already exists")
	// ErrUnchanged, returned by an Update function, leaves the batch as it was; Update then
	// returns the current batch and no error.
	ErrUnchanged = errors.New("batchstate: unchanged")
	// ErrUnavailable: the store could not be reached, or did not answer in time (Redis down,
	// hung, loading or failing over). Nothing says whether a change was applied; trying again
	// later is safe.
	ErrUnavailable = errors.New("batchstate: the state store cannot be reached")
)

// Store keeps batches and their results. Every method is safe for concurrent use, across
// processes for shared implementations.
type Store interface {
	// Create stores a new batch; ErrExists if its id is taken.
	Create(ctx context.Context, b *Batch) error
	// Get returns the batch with its current counts; ErrNotFound if there is none.
	Get(ctx context.Context, id string) (*Batch, error)
	// List returns at most limit batches, newest first (ids sort by creation time), starting
	// after the batch with id after ("" starts from the newest), and whether more follow.
	List(ctx context.Context, after string, limit int) (batches []*Batch, more bool, err error)
	// Update applies fn to the batch's current state and stores the result atomically: if the
	// batch changed meanwhile, fn runs again on the new state. An error from fn is returned and
	// nothing is stored (ErrUnchanged: nothing stored, no error). fn must not change ID or Counts
	// other than Counts.Total.
	Update(ctx context.Context, id string, fn func(*Batch) error) (*Batch, error)
	// Record stores the results of lines whose custom_id has none yet, moving the counts by
	// their kinds; results of lines already recorded are ignored, and so are all results while
	// the batch's status does not accept them (Status.Accepting). It returns the counts after.
	Record(ctx context.Context, id string, results []Result) (Counts, error)
	// Recorded reports, for each custom id, whether its line already has a result.
	Recorded(ctx context.Context, id string, customIDs []string) ([]bool, error)
	// Results calls fn with every recorded result of the batch, in no particular order; the
	// Line passed is valid only during the call.
	Results(ctx context.Context, id string, fn func(Result) error) error
	// DropResults forgets the batch's recorded results once its files are written; counts stay.
	DropResults(ctx context.Context, id string) error
	// Active returns the ids of batches whose status is not terminal.
	Active(ctx context.Context) ([]string, error)
}
