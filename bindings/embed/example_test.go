package embed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/infergate/infergate/bindings/embed"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// A Go program serves one of its functions as a KServe model: New (the zero Config is the
// runtime's config with no models of its own), RegisterTensorModel, Start on a port, Stop. The
// same model answers on KServe gRPC, Connect, gRPC-Web and REST; here, REST.
func Example() {
	g, err := embed.New(embed.Config{LogLevel: "error"})
	if err != nil {
		panic(err)
	}
	defer g.Stop(context.Background())

	spec := embed.TensorSpec{Name: "double",
		Inputs:  []embed.TensorDecl{{Name: "X", Datatype: "FP32", Shape: []int64{-1}}},
		Outputs: []embed.TensorDecl{{Name: "Y", Datatype: "FP32", Shape: []int64{-1}}}}
	err = g.RegisterTensorModel(spec, func(_ context.Context, req *engines.Request) ([]engines.Tensor, error) {
		x := req.Input("X") // already checked against spec: FP32, one dimension
		y := make([]float32, len(x.Data)/4)
		for i, v := range tensor.View[float32](x.Data) {
			y[i] = 2 * v
		}
		return []engines.Tensor{{Name: "Y", Datatype: inference.DataType_TYPE_FP32, Shape: x.Shape, Data: tensor.Bytes(y)}}, nil
	})
	if err != nil {
		panic(err)
	}
	addr, err := g.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}

	res, err := http.Post("http://"+addr+"/v2/models/double/infer", "application/json",
		strings.NewReader(`{"inputs":[{"name":"X","datatype":"FP32","shape":[3],"data":[1,2.5,-4]}]}`))
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	fmt.Println(res.StatusCode, string(body))
	// Output:
	// 200 {"model_name":"double","model_version":"1","outputs":[{"name":"Y","datatype":"FP32","shape":[3],"data":[2,5,-8]}]}
}

// A Go function served as an LLM: OpenAI's chat and completions routes (streamed or whole),
// OpenAIService over Connect and gRPC, and the KServe bridge's text_input model all reach it,
// through the same stages as an upstream server's model. The function calls emit with each
// piece of its answer.
func ExampleGateway_RegisterLLM() {
	g, err := embed.New(embed.Config{LogLevel: "error"})
	if err != nil {
		panic(err)
	}
	defer g.Stop(context.Background())
	err = g.RegisterLLM("greeter", func(_ context.Context, req embed.LLMRequest, emit func(string) error) error {
		// req.Body is the OpenAI request body, as the client sent it.
		for _, piece := range []string{"Hello", " from ", req.Model} {
			if err := emit(piece); err != nil {
				return err // the client went away
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	addr, err := g.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}

	res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"greeter","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var answer struct {
		Choices []struct {
			Message struct{ Role, Content string }
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&answer); err != nil {
		panic(err)
	}
	fmt.Println(res.StatusCode, answer.Choices[0].Message.Role+":", answer.Choices[0].Message.Content)
	// Output:
	// 200 assistant: Hello from greeter
}
