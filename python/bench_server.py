"""Serves Python models next to the built-in Go ones, for the Go benchmark and test in
bindings/cshared (BenchmarkPythonIdentity, TestPythonModelsOverGRPC): an identity model, one that
raises, and a streaming LLM. Prints one JSON line (address, the direct call's cost) and serves
until stdin closes."""
import json
import sys
import time

import infergate

SPEC = dict(inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
            outputs=[{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}])


def identity(inputs):
    return {"OUTPUT0": inputs["INPUT0"]}


def raises(inputs):
    raise infergate.InferError("bad request for this model")


def words(prompt):
    for w in prompt.split():
        yield w.upper() + " "


def direct_us(n=200000):
    arg = {"INPUT0": memoryview(bytearray(64)).cast("f")}
    start = time.perf_counter()
    for _ in range(n):
        identity(arg)
    return (time.perf_counter() - start) / n * 1e6


def main():
    gw = infergate.Gateway(config={"builtin_models": True}, listen="127.0.0.1:0")
    gw.register_tensor_model("py_identity", fn=identity, **SPEC)
    gw.register_tensor_model("py_raises", fn=raises, **SPEC)
    gw.register_llm("py_words", words)
    gw.start()
    print(json.dumps({"addr": gw.address, "direct_us": direct_us()}), flush=True)
    sys.stdin.read()
    gw.stop()


if __name__ == "__main__":
    main()
