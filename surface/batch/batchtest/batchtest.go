// Package batchtest holds what tests of the Files and Batches API share, in this module's
// packages and in the runtime's end-to-end tests.
package batchtest

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Upload stores content as a batch input file through POST baseURL/v1/files (multipart, purpose
// batch), with an API key unless key is "", and returns the file's id.
func Upload(tb testing.TB, baseURL, key, content string) string {
	tb.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(tb, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", "input.jsonl")
	require.NoError(tb, err)
	_, _ = io.WriteString(fw, content)
	require.NoError(tb, mw.Close())
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/files", &body)
	require.NoError(tb, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(tb, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Equal(tb, http.StatusOK, res.StatusCode, string(b))
	var f struct{ ID string }
	require.NoError(tb, json.Unmarshal(b, &f))
	return f.ID
}
