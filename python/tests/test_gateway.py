"""The Python binding end to end: a gateway in this process, Python models, real sockets.

Run from the repository root after `python3 python/build.py`:

    PYTHONPATH=python python3 -m unittest discover -s python/tests -v

(INFERGATE_LIB=path/libinfergate.so points at another build, as the Go test does.)
"""
import base64
import concurrent.futures
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import urllib.error
import urllib.request

import infergate

try:
    import grpc
except ImportError:  # Debian's python3-grpcio, when the interpreter sees it
    grpc = None

FP32_IN = [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}]
FP32_OUT = [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}]


def post(url, body, timeout=30, headers=None, with_headers=False):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        out = e.code, e.read(), e.headers
    return out if with_headers else out[:2]


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def as_list(v):
    return [float(x) for x in (v.tolist() if hasattr(v, "tolist") else list(v))]


class GatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = infergate.Gateway(listen="127.0.0.1:0")
        cls.release = threading.Event()
        cls.slow_started = threading.Event()

        def add_one(inputs):
            return {"OUTPUT0": [x + 1 for x in as_list(inputs["INPUT0"])]}

        def slow(inputs):
            cls.slow_started.set()
            cls.release.wait(20)
            return {"OUTPUT0": as_list(inputs["INPUT0"])}

        def boom(inputs):
            raise ValueError("negative values are not allowed")

        def wrong_dtype(inputs):
            return {"OUTPUT0": memoryview(struct.pack("<2d", 1.0, 2.0)).cast("d")}

        def not_a_dict(inputs):
            return object()

        def upper(inputs):
            # Nested like the tensor: rows of one element (lists, or a NumPy object array).
            return {"TEXT_OUT": [[x.upper() for x in row] for row in inputs["TEXT"]]}

        cls.gw.register_tensor_model("add_one", inputs=FP32_IN, outputs=FP32_OUT, fn=add_one)
        cls.gw.register_tensor_model("slow", inputs=FP32_IN, outputs=FP32_OUT, fn=slow)
        cls.gw.register_tensor_model("boom", inputs=FP32_IN, outputs=FP32_OUT, fn=boom)
        cls.gw.register_tensor_model("wrong_dtype", inputs=FP32_IN, outputs=FP32_OUT, fn=wrong_dtype)
        cls.gw.register_tensor_model("not_a_dict", inputs=FP32_IN, outputs=FP32_OUT, fn=not_a_dict)
        cls.gw.register_tensor_model("upper", fn=upper, max_batch_size=8,
                                     inputs=[{"name": "TEXT", "datatype": "BYTES", "shape": [1]}],
                                     outputs=[{"name": "TEXT_OUT", "datatype": "BYTES", "shape": [1]}])
        cls.gw.register_llm("echo", lambda prompt: "you said: " + prompt)
        cls.gw.register_llm("words", lambda prompt: (w + " " for w in prompt.split()))

        def fails(prompt):
            raise RuntimeError("the LLM is out of tokens")
        cls.gw.register_llm("fails", fails)
        cls.gw.register_llm("number", lambda prompt: 42)
        cls.gw.start()
        cls.url = cls.gw.url

    @classmethod
    def tearDownClass(cls):
        cls.release.set()
        cls.gw.stop()

    def infer(self, model, data, timeout=30):
        body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(data)], "data": data}]}
        return post(f"{self.url}/v2/models/{model}/infer", body, timeout)

    def test_tensor_model_rest(self):
        status, body = self.infer("add_one", [1, 2, 3])
        self.assertEqual(status, 200, body)
        out = json.loads(body)["outputs"][0]
        self.assertEqual((out["name"], out["datatype"], out["shape"], out["data"]), ("OUTPUT0", "FP32", [3], [2, 3, 4]))

    def test_tensor_model_connect(self):
        # Connect's unary protocol with JSON: the KServe gRPC service over HTTP/1.1.
        body = {"modelName": "add_one", "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": ["2"],
                                                     "contents": {"fp32Contents": [1, 2]}}]}
        req = urllib.request.Request(f"{self.url}/inference.GRPCInferenceService/ModelInfer",
                                     json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
        raw = base64.b64decode(answer["rawOutputContents"][0])
        self.assertEqual(struct.unpack("<2f", raw), (2.0, 3.0))

    def test_llm_on_kserve_generate_stream(self):
        req = urllib.request.Request(f"{self.url}/v2/models/words/generate_stream",
                                     json.dumps({"text_input": "a b c"}).encode(), {"Content-Type": "application/json"})
        text = ""
        with urllib.request.urlopen(req, timeout=30) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    text += json.loads(line[6:]).get("text_output", "")
        self.assertEqual(text, "a b c ")

    def test_metadata_and_config_as_declared(self):
        status, body = get(f"{self.url}/v2/models/add_one")
        self.assertEqual(status, 200, body)
        meta = json.loads(body)
        self.assertEqual(meta["inputs"], [{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}])
        self.assertEqual(meta["outputs"], [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}])
        status, body = get(f"{self.url}/v2/models/upper/config")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["max_batch_size"], 8)

    def test_bytes_model_with_batch(self):
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2, 1], "data": ["ab", "cd"]}]}
        status, answer = post(f"{self.url}/v2/models/upper/infer", body)
        self.assertEqual(status, 200, answer)
        out = json.loads(answer)["outputs"][0]
        self.assertEqual((out["shape"], out["data"]), ([2, 1], ["AB", "CD"]))

    def test_python_exception_is_the_request_error(self):
        status, body = self.infer("boom", [1])
        self.assertEqual(status, 500, body)
        self.assertIn("ValueError: negative values are not allowed", json.loads(body)["error"])

    def test_bad_outputs_are_request_errors(self):
        status, body = self.infer("wrong_dtype", [1, 2])
        self.assertEqual(status, 500, body)
        self.assertIn("returned output 'OUTPUT0' as FP64, declared FP32", json.loads(body)["error"])
        status, body = self.infer("not_a_dict", [1])
        self.assertEqual(status, 500, body)
        self.assertIn("want a dict of outputs", json.loads(body)["error"])
        # The process is still serving.
        self.assertEqual(self.infer("add_one", [0])[0], 200)

    def test_bad_input_is_invalid_argument(self):
        body = {"inputs": [{"name": "NOPE", "datatype": "FP32", "shape": [1], "data": [1]}]}
        status, answer = post(f"{self.url}/v2/models/add_one/infer", body)
        self.assertEqual(status, 400, answer)

    def test_duplicate_and_invalid_registrations_raise_value_error(self):
        with self.assertRaisesRegex(ValueError, "already registered"):
            self.gw.register_tensor_model("add_one", inputs=FP32_IN, outputs=FP32_OUT, fn=lambda d: d)
        with self.assertRaisesRegex(ValueError, "unknown datatype"):
            self.gw.register_tensor_model("bad", inputs=[{"name": "A", "datatype": "FP33", "shape": [1]}],
                                          outputs=FP32_OUT, fn=lambda d: d)
        with self.assertRaisesRegex(ValueError, "needs name, datatype and shape"):
            self.gw.register_tensor_model("bad", inputs=[{"name": "A"}], outputs=FP32_OUT, fn=lambda d: d)
        with self.assertRaisesRegex(ValueError, "already registered"):
            self.gw.register_llm("echo", lambda p: p)
        with self.assertRaisesRegex(ValueError, "already registered"):
            self.gw.register_llm("add_one", lambda p: p)

    def test_llm_chat(self):
        status, body = post(f"{self.url}/v1/chat/completions",
                            {"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["choices"][0]["message"]["content"], "you said: hi")

    def test_llm_completions(self):
        status, body = post(f"{self.url}/v1/completions", {"model": "echo", "prompt": "ho"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["choices"][0]["text"], "you said: ho")

    def test_llm_chat_streaming(self):
        req = urllib.request.Request(f"{self.url}/v1/chat/completions", json.dumps(
            {"model": "words", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}).encode(),
            {"Content-Type": "application/json"})
        pieces, done = [], False
        with urllib.request.urlopen(req, timeout=30) as r:
            self.assertTrue(r.headers["Content-Type"].startswith("text/event-stream"))
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    pieces.append(delta["content"])
        self.assertTrue(done)
        self.assertEqual(pieces, ["one ", "two ", "three "])

    def test_llm_error(self):
        status, body = post(f"{self.url}/v1/chat/completions",
                            {"model": "fails", "messages": [{"role": "user", "content": "hi"}]})
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("out of tokens", body.decode())

    def test_llm_returning_a_non_string_is_a_request_error(self):
        status, body = post(f"{self.url}/v1/completions", {"model": "number", "prompt": "x"})
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("returned int, want str or an iterable of str", body.decode())

    def test_llm_on_openai_models_and_kserve_bridge(self):
        status, body = get(f"{self.url}/v1/models")
        self.assertEqual(status, 200, body)
        self.assertTrue({"echo", "words"} <= {m["id"] for m in json.loads(body)["data"]})
        body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["bridge"]}]}
        status, answer = post(f"{self.url}/v2/models/echo/infer", body)
        self.assertEqual(status, 200, answer)
        outs = {o["name"]: o for o in json.loads(answer)["outputs"]}
        self.assertEqual(outs["text_output"]["data"], ["you said: bridge"])

    def test_many_concurrent_requests(self):
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: self.infer("add_one", [i, i]), range(64)))
        for i, (status, body) in enumerate(results):
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["outputs"][0]["data"], [i + 1, i + 1])

    def test_slow_model_blocks_neither_health_nor_other_models(self):
        self.slow_started.clear()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            pending = pool.submit(self.infer, "slow", [7])
            self.assertTrue(self.slow_started.wait(10))
            self.assertEqual(get(f"{self.url}/v2/health/ready")[0], 200)
            self.assertEqual(self.infer("add_one", [1])[0], 200)
            status, _ = post(f"{self.url}/v1/chat/completions",
                             {"model": "echo", "messages": [{"role": "user", "content": "x"}]})
            self.assertEqual(status, 200)
            self.assertFalse(pending.done())
            self.release.set()
            status, body = pending.result(20)
            self.assertEqual(status, 200, body)
        self.release.clear()

    def test_deadline_past_a_hung_model(self):
        # Triton's timeout header over REST is not standard; gRPC deadlines are tested in
        # GRPCTest. Here: the server stays responsive while a model hangs.
        self.slow_started.clear()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(self.infer, "slow", [1])
            self.assertTrue(self.slow_started.wait(10))
            self.assertEqual(get(f"{self.url}/v2/health/live")[0], 200)
            self.release.set()
            pending.result(20)
        self.release.clear()


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _fields(msg):
    """Top-level length-delimited fields of a protobuf message: (number, bytes) pairs."""
    i, out = 0, []
    while i < len(msg):
        key, shift = 0, 0
        while True:
            b = msg[i]; i += 1
            key |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                break
        num, wire = key >> 3, key & 7
        if wire == 0:
            while msg[i] & 0x80:
                i += 1
            i += 1
            continue
        n, shift = 0, 0
        while True:
            b = msg[i]; i += 1
            n |= (b & 0x7F) << shift; shift += 7
            if not b & 0x80:
                break
        out.append((num, msg[i:i + n]))
        i += n
    return out


@unittest.skipIf(grpc is None, "grpc is not importable (Debian: python3-grpcio)")
class GRPCTest(unittest.TestCase):
    """KServe gRPC with hand-encoded messages: grpcio, no generated stubs needed."""

    def test_model_infer_and_errors(self):
        with infergate.Gateway(listen="127.0.0.1:0") as gw:
            gw.register_tensor_model("double", inputs=FP32_IN, outputs=FP32_OUT,
                                     fn=lambda d: {"OUTPUT0": [2 * x for x in as_list(d["INPUT0"])]})

            def raises(d):
                raise infergate.InferError("bad request for this model")
            gw.register_tensor_model("raises", inputs=FP32_IN, outputs=FP32_OUT, fn=raises)
            hang = threading.Event()
            gw.register_tensor_model("hangs", inputs=FP32_IN, outputs=FP32_OUT,
                                     fn=lambda d: hang.wait(10) and {})
            with grpc.insecure_channel(gw.address) as ch:
                call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                      request_serializer=lambda b: b, response_deserializer=lambda b: b)

                def request(model):
                    tensor = _field(1, b"INPUT0") + _field(2, b"FP32") + _field(3, _varint(2))
                    return _field(1, model.encode()) + _field(5, tensor) + _field(7, struct.pack("<2f", 1.5, 2.0))

                answer = call(request("double"), timeout=10)
                raw = [v for n, v in _fields(answer) if n == 6]
                self.assertEqual(struct.unpack("<2f", raw[0]), (3.0, 4.0))
                with self.assertRaises(grpc.RpcError) as e:
                    call(request("raises"), timeout=10)
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("bad request for this model", e.exception.details())
                with self.assertRaises(grpc.RpcError) as e:
                    call(request("hangs"), timeout=0.5)
                self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
                hang.set()


try:
    import numpy
except ImportError:
    numpy = None


@unittest.skipIf(numpy is None, "NumPy is not importable (Debian: python3-numpy)")
class NumPyTest(unittest.TestCase):
    def test_arrays_in_and_out(self):
        seen = {}

        def fn(d):
            seen["type"] = type(d["INPUT0"])
            return {"OUTPUT0": d["INPUT0"] * 2}

        def wrong(d):
            return {"OUTPUT0": d["INPUT0"].astype(numpy.float64)}

        with infergate.Gateway(listen="127.0.0.1:0") as gw:
            gw.register_tensor_model("np", inputs=FP32_IN, outputs=FP32_OUT, fn=fn)
            gw.register_tensor_model("wrong", inputs=FP32_IN, outputs=FP32_OUT, fn=wrong)
            body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1.5, -1]}]}
            status, answer = post(f"{gw.url}/v2/models/np/infer", body)
            self.assertEqual(status, 200, answer)
            self.assertEqual(json.loads(answer)["outputs"][0]["data"], [3, -2])
            self.assertIs(seen["type"], numpy.ndarray)
            status, answer = post(f"{gw.url}/v2/models/wrong/infer", body)
            self.assertEqual(status, 500, answer)
            self.assertIn("as FP64, declared FP32", json.loads(answer)["error"])


class LifecycleTest(unittest.TestCase):
    def test_config_dict_and_builtin_models(self):
        with infergate.Gateway(config={"builtin_models": True, "server_name": "py"}, listen="127.0.0.1:0") as gw:
            status, body = get(f"{gw.url}/v2")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["name"], "py")
            status, body = post(f"{gw.url}/v2/repository/index", {})
            self.assertEqual(status, 200, body)
            self.assertTrue(json.loads(body))

    def test_bad_config_raises(self):
        with self.assertRaisesRegex(ValueError, "no_such_key"):
            infergate.Gateway(config={"no_such_key": 1})

    def test_whole_runtime_config(self):
        # Every key of the runtime's config works embedded: API keys guard a Python LLM, and its
        # models.<name> stages (the response cache here) run in front of it.
        import hashlib
        key = "sk-python-test"
        calls = []
        config = {"log_level": "error",
                  "auth": {"keys": [{"name": "app", "sha256": hashlib.sha256(key.encode()).hexdigest(), "models": ["echo"]}]},
                  "models": {"echo": {"cache": {"mode": "exact"}}}}
        with infergate.Gateway(config=config, listen="127.0.0.1:0") as gw:
            gw.register_llm("echo", lambda p: calls.append(p) or "echo: " + p)
            body = {"model": "echo", "prompt": "hi", "temperature": 0}
            status, _ = post(f"{gw.url}/v1/completions", body)
            self.assertEqual(status, 401)
            auth = {"Authorization": "Bearer " + key}
            status, out, h = post(f"{gw.url}/v1/completions", body, headers=auth, with_headers=True)
            self.assertEqual(status, 200, out)
            self.assertEqual(h["X-Infergate-Cache"], "miss")
            status, out, h = post(f"{gw.url}/v1/completions", body, headers=auth, with_headers=True)
            self.assertEqual(status, 200, out)
            self.assertEqual(json.loads(out)["choices"][0]["text"], "echo: hi")
            self.assertEqual(h["X-Infergate-Cache"], "hit")
            self.assertEqual(calls, ["hi"])
        with self.assertRaisesRegex(ValueError, "limits"):
            infergate.Gateway(config={"limits": {"nope": 1}})

    def test_register_backend(self):
        with infergate.Gateway(listen="127.0.0.1:0") as gw, infergate.Gateway(listen="127.0.0.1:0") as upstream:
            upstream.register_llm("remote-echo", lambda p: "remote: " + p)
            lease = gw.register_backend("remote-echo", upstream.url, model_type="completions", backend_type="openai")
            self.assertTrue(lease)
            deadline = time.time() + 10
            while time.time() < deadline:
                status, body = post(f"{gw.url}/v1/completions", {"model": "remote-echo", "prompt": "x"})
                if status == 200:
                    break
                time.sleep(0.05)
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["choices"][0]["text"], "remote: x")
            gw.deregister_backend(lease)
            with self.assertRaises(ValueError):
                gw.register_backend("", "not a url")

    def test_stop_drains_and_refuses(self):
        gw = infergate.Gateway(listen="127.0.0.1:0")
        gw.register_tensor_model("m", inputs=FP32_IN, outputs=FP32_OUT, fn=lambda d: {"OUTPUT0": [1.0]})
        gw.start()
        url = gw.url
        gw.stop()
        gw.stop()  # twice is fine
        with self.assertRaises(OSError):
            get(f"{url}/v2/health/ready", timeout=2)
        with self.assertRaises(RuntimeError):
            gw.register_llm("late", lambda p: p)

    def test_a_dropped_gateway_keeps_serving(self):
        # Go keeps serving after the Python object is dropped: its callbacks must stay alive.
        import gc
        gw = infergate.Gateway(listen="127.0.0.1:0")
        gw.register_llm("kept", lambda p: "still " + p)
        url = gw.url if gw.start() else None
        del gw
        gc.collect()
        status, body = post(f"{url}/v1/completions", {"model": "kept", "prompt": "here"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["choices"][0]["text"], "still here")

    def test_sigterm_stops_serve_forever(self):
        script = textwrap.dedent("""
            import signal, threading, time
            import infergate
            gw = infergate.Gateway(listen="127.0.0.1:0")
            gw.register_llm("echo", lambda p: p)
            gw.start()

            def announce():
                # The URL goes out only once serve_forever has its SIGTERM handler: a signal
                # sent before that takes Python's default action, as it would without infergate.
                while signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                    time.sleep(0.01)
                print(gw.url, flush=True)
            threading.Thread(target=announce, daemon=True).start()
            gw.serve_forever()
            print("stopped", flush=True)
        """)
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        try:
            url = p.stdout.readline().strip()
            status, body = post(f"{url}/v1/completions", {"model": "echo", "prompt": "x"})
            self.assertEqual(status, 200, body)
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(30), 0)
            self.assertEqual(p.stdout.read().strip(), "stopped")
        finally:
            p.kill()
            p.stdout.close()

    def test_example_script(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        p = subprocess.run([sys.executable, os.path.join(root, "examples", "python", "serve.py"), "--self-test"],
                           capture_output=True, text=True, timeout=60, env=dict(os.environ))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("[2, 4, 6]", p.stdout)
        self.assertIn("HELLO THERE", p.stdout)

    def test_clean_exit_with_a_request_in_flight(self):
        # The interpreter exits while a Python model is running and a gateway was never stopped:
        # atexit drains it; the process ends at once, with status 0.
        script = textwrap.dedent("""
            import json, threading, time, urllib.request, infergate
            gw = infergate.Gateway(listen="127.0.0.1:0")
            started = threading.Event()
            def slow(d):
                started.set(); time.sleep(0.5); return {"OUTPUT0": [1.0]}
            gw.register_tensor_model("slow", fn=slow,
                inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
                outputs=[{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}])
            gw.register_llm("echo", lambda p: p)
            gw.start()
            body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}).encode()
            def call():
                try:
                    urllib.request.urlopen(urllib.request.Request(gw.url + "/v2/models/slow/infer", body), timeout=10).read()
                except Exception:
                    pass
            threading.Thread(target=call, daemon=True).start()
            started.wait(10)
            print("exiting", flush=True)
        """)
        env = dict(os.environ)
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("exiting", p.stdout)


if __name__ == "__main__":
    unittest.main()
