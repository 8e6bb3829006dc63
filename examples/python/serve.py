#!/usr/bin/env python3
"""infergate serving Python models: a tensor model and a streaming LLM, in one process.

    python3 python/build.py                          # once: builds python/infergate/libinfergate.so
    PYTHONPATH=python python3 examples/python/serve.py

Then, from another shell:

    curl -s localhost:8000/v2/models/scale/infer -d \\
      '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[3],"data":[1,2,3]}]}'
    curl -sN localhost:8000/v1/chat/completions -d \\
      '{"model":"shout","stream":true,"messages":[{"role":"user","content":"hello there"}]}'
    curl -s localhost:8000/v2/models/shout/infer -d \\
      '{"inputs":[{"name":"text_input","datatype":"BYTES","shape":[1],"data":["via KServe"]}]}'

The same models answer Triton's gRPC clients (tritonclient, grpcurl) on the same port.
Ctrl-C (or SIGTERM) drains and stops. With --self-test it calls itself and exits.
"""
import json
import sys
import urllib.request

import infergate


def scale(inputs):
    """FP32 [-1] -> FP32 [-1]: every element times 2. With NumPy installed inputs are arrays."""
    x = inputs["INPUT0"]
    if hasattr(x, "dtype"):
        return {"OUTPUT0": x * 2}
    return {"OUTPUT0": [v * 2 for v in x]}


def shout(prompt):
    """An LLM that streams the prompt back, word by word, in capitals."""
    if not prompt:
        raise ValueError("say something")
    for word in prompt.split():
        yield word.upper() + " "


def main():
    listen = "127.0.0.1:0" if "--self-test" in sys.argv else "127.0.0.1:8000"
    with infergate.Gateway(listen=listen) as gw:
        gw.register_tensor_model(
            "scale", fn=scale,
            inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
            outputs=[{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}])
        gw.register_llm("shout", shout)
        print(f"serving on {gw.url}", flush=True)
        if "--self-test" not in sys.argv:
            gw.serve_forever()
            return
        req = urllib.request.Request(gw.url + "/v2/models/scale/infer", json.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]}).encode())
        print(json.loads(urllib.request.urlopen(req).read())["outputs"][0]["data"])
        req = urllib.request.Request(gw.url + "/v1/chat/completions", json.dumps(
            {"model": "shout", "messages": [{"role": "user", "content": "hello there"}]}).encode())
        print(json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"])


if __name__ == "__main__":
    main()
