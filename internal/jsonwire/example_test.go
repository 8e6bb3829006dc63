package jsonwire_test

import (
	"errors"
	"fmt"

	"github.com/infergate/infergate/internal/jsonwire"
)

// A reader takes the members it wants and skips the rest; everything is checked on the way.
func ExampleScanner() {
	body := []byte(`{"messages":[{"role":"user","content":"hi"}],"model":"gr\u00e4nite","stream":true}`)
	s := jsonwire.NewScanner(body, jsonwire.Options{})
	if err := s.EnterObject(); err != nil {
		fmt.Println(err)
		return
	}
	for {
		key, more, err := s.NextMember()
		if err != nil {
			fmt.Println(err)
			return
		}
		if !more {
			break
		}
		switch string(key.Contents(body)) {
		case "model":
			t, _ := s.ReadString()
			model, _ := jsonwire.UnescapeString(t.Contents(body), jsonwire.ReplaceInvalid)
			fmt.Printf("model %q at [%d,%d)\n", model, t.Start, t.End)
		case "stream":
			stream, _ := s.ReadBool()
			fmt.Println("stream", stream)
		default:
			t, _ := s.ReadValue()
			fmt.Printf("skipped %s of %d bytes\n", t.Kind, t.End-t.Start)
		}
	}
	fmt.Println(s.Finish())
	// Output:
	// skipped array of 32 bytes
	// model "gränite" at [53,67)
	// stream true
	// <nil>
}

func ExampleValidate() {
	err := jsonwire.Validate([]byte(`{"a":[1,2,]}`), jsonwire.Options{})
	fmt.Println(err)
	var se *jsonwire.SyntaxError
	fmt.Println(errors.As(err, &se), se.Offset)
	// Output:
	// malformed JSON at byte 10: a value expected
	// true 10
}

func ExampleAppendString() {
	for _, e := range []jsonwire.Escaping{jsonwire.Minimal, jsonwire.EncodingJSON, jsonwire.Canonical, jsonwire.PythonASCII} {
		fmt.Printf("%s\n", jsonwire.AppendString(nil, "<tab>\there\b caf\u00e9 \xff", e))
	}
	// Output:
	// "<tab>\there\u0008 café \ufffd"
	// "\u003ctab\u003e\there\b café \ufffd"
	// "<tab>\u0009here\u0008 café �"
	// "<tab>\there\b caf\u00e9 \ufffd"
}
