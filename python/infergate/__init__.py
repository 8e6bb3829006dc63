"""infergate inside a Python process.

The gateway (KServe v2 over gRPC, Connect, gRPC-Web and REST; OpenAI's HTTP API) runs in this
process from libinfergate.so, a Go C shared library loaded with ctypes, and serves Python
functions as models::

    import infergate

    def add_one(inputs):
        return {"OUTPUT0": inputs["INPUT0"] + 1}

    with infergate.Gateway(listen="127.0.0.1:8000") as gw:
        gw.register_tensor_model("add_one", fn=add_one,
            inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [-1]}],
            outputs=[{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1]}])
        gw.register_llm("echo", lambda prompt: prompt)
        gw.serve_forever()

Build the library first with ``python3 python/build.py``. Only the standard library is needed;
with NumPy importable, tensor models get and may return NumPy arrays.
"""

import atexit
import ctypes
import inspect
import json
import os
import signal
import struct
import sys
import threading

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the host
    _np = None

__all__ = ["Gateway", "InferError", "load_library"]

_DIR = os.path.dirname(os.path.abspath(__file__))

_TENSOR_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.c_int32)
_LLM_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32)

_lib = None
_lib_lock = threading.Lock()


def load_library(path=None):
    """Loads libinfergate.so: path, else $INFERGATE_LIB, else the one beside this file."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = path or os.environ.get("INFERGATE_LIB") or os.path.join(_DIR, "libinfergate.so")
        if not os.path.exists(path):
            raise OSError(f"{path} not found: build it with `python3 python/build.py`")
        lib = ctypes.CDLL(path)  # CDLL: the GIL is released during every call into Go
        P = ctypes.c_char_p
        PP = ctypes.POINTER(ctypes.c_void_p)
        i64, i32, u64 = ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64
        sig = {
            "ig_free": (None, [ctypes.c_void_p]),
            "ig_new": (i64, [P, i64, i32, PP]),
            "ig_start": (i32, [i64, P, PP, PP]),
            "ig_stop": (i32, [i64, i64, PP]),
            "ig_close": (None, [i64]),
            "ig_register_tensor": (i32, [i64, P, i64, ctypes.c_void_p, PP]),
            "ig_output": (i32, [u64, P, P, ctypes.c_char_p, i32, ctypes.c_void_p, i64]),
            "ig_fail": (i32, [u64, P, P]),
            "ig_register_llm": (i32, [i64, P, ctypes.c_void_p, PP]),
            "ig_emit": (i32, [u64, P, i64]),
            "ig_register_backend": (i32, [i64, P, i64, PP, PP]),
            "ig_deregister_backend": (i32, [i64, P, PP]),
        }
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _lib = lib
        return lib


def _take(lib, p):
    """The C string p (from Go) as str; frees it."""
    if not p.value:
        return ""
    try:
        return ctypes.string_at(p.value).decode("utf-8", "replace")
    finally:
        lib.ig_free(p.value)


class InferError(Exception):
    """Raised by a model function to answer with a chosen gRPC code (default INVALID_ARGUMENT)."""

    def __init__(self, message, code="INVALID_ARGUMENT"):
        super().__init__(message)
        self.code = code


# KServe datatype -> struct/memoryview format and NumPy dtype name.
_FORMATS = {"BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b",
            "INT16": "h", "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d", "BF16": "H"}
_NP_TO_KSERVE = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
                 "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
                 "float32": "FP32", "float64": "FP64"}


_FMT_TO_KSERVE = {v: k for k, v in _FORMATS.items() if k != "BF16"}
_KSERVE_TO_NP = {v: k for k, v in _NP_TO_KSERVE.items()}
_decode = json.JSONDecoder().decode

# A memoryview over C memory, without a copy.
_memory_from = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_from.restype = ctypes.py_object
_memory_from.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_PYBUF_READ = 0x100


def _memory(ptr, size):
    return _memory_from(ptr, size, _PYBUF_READ)


def _address(buf):
    """(address, size, owner) of a buffer's bytes, copying only read-only memoryviews; owner
    must stay alive until the bytes are handed over."""
    if isinstance(buf, bytes):
        return buf, len(buf), buf  # ctypes passes a bytes object's own buffer
    if _np is not None and isinstance(buf, _np.ndarray):
        return buf.__array_interface__["data"][0] if buf.nbytes else None, buf.nbytes, buf
    mv = memoryview(buf).cast("B")
    if not len(mv):
        return None, 0, mv
    if mv.readonly:
        b = mv.tobytes()
        return b, len(b), b
    c = ctypes.c_char.from_buffer(mv)
    return ctypes.addressof(c), len(mv), c


def _split_bytes(raw):
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise ValueError("malformed BYTES tensor")
        (n,) = struct.unpack_from("<I", raw, i)
        i += 4
        out.append(bytes(raw[i:i + n]))
        i += n
    return out


def _join_bytes(items):
    parts = []
    for it in items:
        if isinstance(it, str):
            it = it.encode("utf-8")
        elif not isinstance(it, (bytes, bytearray, memoryview)):
            raise TypeError(f"a BYTES element must be str or bytes, not {type(it).__name__}")
        parts.append(struct.pack("<I", len(it)))
        parts.append(bytes(it))
    return b"".join(parts)


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _input_value(datatype, shape, view):
    """An input as the function sees it: a NumPy array (no copy) when NumPy is there, else a
    memoryview shaped like the tensor; BYTES tensors are lists of bytes (or NumPy object arrays)."""
    if datatype == "BYTES":
        items = _split_bytes(view)
        if _np is not None:
            arr = _np.empty(len(items), dtype=object)
            arr[:] = items
            return arr.reshape(shape)
        return _nest(items, shape)
    if _np is not None:
        dt = "uint16" if datatype == "BF16" else _KSERVE_TO_NP[datatype]
        return _np.frombuffer(view, dtype=_np.dtype(dt).newbyteorder("<")).reshape(shape)
    fmt = _FORMATS[datatype]
    mv = memoryview(view).cast("B")
    if 0 in shape or not shape:
        return mv.cast(fmt)
    return mv.cast(fmt, shape)


def _nest(items, shape):
    """items as nested lists of the tensor's shape (a 1-D tensor: the flat list)."""
    for d in reversed(shape[1:]):
        if d <= 0:
            break
        items = [items[i:i + d] for i in range(0, len(items), d)]
    return items


def _flatten(v, shape, depth=0):
    if isinstance(v, (list, tuple)):
        if len(shape) <= depth:
            shape.append(len(v))
        elif shape[depth] != len(v):
            raise ValueError("ragged nested list")
        out = []
        for x in v:
            out.extend(_flatten(x, shape, depth + 1))
        return out
    return [v]


def _output_value(name, declared, value):
    """(datatype, shape, buffer) for one returned output; buffer supports the buffer protocol."""
    if _np is not None and isinstance(value, _np.ndarray):
        if value.dtype == object or value.dtype.kind in "SU":
            return "BYTES", list(value.shape), _join_bytes(value.reshape(-1).tolist())
        dt = _NP_TO_KSERVE.get(value.dtype.name)
        if dt is None:
            raise TypeError(f"output '{name}' has NumPy dtype {value.dtype}, which KServe has no datatype for")
        if declared == "BF16" and dt == "UINT16":
            dt = "BF16"
        arr = _np.ascontiguousarray(value)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return dt, list(arr.shape), arr
    if isinstance(value, memoryview):
        fmt = value.format.lstrip("<@=")
        dt = _FMT_TO_KSERVE.get(fmt)
        if dt is None:
            raise TypeError(f"output '{name}' is a memoryview of format {value.format!r}")
        if declared == "BF16" and dt == "UINT16":
            dt = "BF16"
        return dt, list(value.shape), value if value.c_contiguous else value.tobytes()
    if isinstance(value, (bytes, bytearray, str)):
        value = [value]
    if isinstance(value, (int, float, bool)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"output '{name}' is a {type(value).__name__}; return a list, a memoryview"
                        + (" or a NumPy array" if _np is not None else ""))
    shape = []
    flat = _flatten(value, shape)
    if not shape:
        shape = [len(flat)]
    if declared == "BYTES":
        return "BYTES", shape, _join_bytes(flat)
    fmt = _FORMATS[declared]
    try:
        return declared, shape, struct.pack("<%d%s" % (len(flat), fmt), *flat)
    except struct.error as e:
        raise TypeError(f"output '{name}' does not fit {declared}: {e}") from None


def _message(e):
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Gateway:
    """An infergate gateway in this process.

    config: None, a dict (the runtime's config file, every key of it, plus server_name,
    drain_timeout, max_message_bytes and log_level; builtin_models defaults to false), a path to a
    YAML/JSON file, or YAML/JSON bytes.
    listen: host:port to serve every protocol on ("127.0.0.1:0" picks a free port).
    """

    def __init__(self, config=None, listen="127.0.0.1:8000", library=None):
        self._lib = load_library(library)
        self._listen = listen
        self._callbacks = []  # ctypes callbacks must outlive the gateway's use of them
        self._declared = {}
        self._handle = 0
        self.address = None
        err = ctypes.c_void_p()
        if config is None:
            data, is_path = b"", 0
        elif isinstance(config, dict):
            data, is_path = json.dumps(config).encode(), 0
        elif isinstance(config, (bytes, bytearray)):
            data, is_path = bytes(config), 0
        elif isinstance(config, (str, os.PathLike)):
            data, is_path = os.fsencode(config), 1
        else:
            raise TypeError("config must be None, a dict, a path or bytes")
        h = self._lib.ig_new(data, len(data), is_path, ctypes.byref(err))
        if not h:
            raise ValueError(_take(self._lib, err))
        self._handle = h
        _live.add(self)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self):
        """Starts serving; returns the address ("host:port") it listens on."""
        addr, err = ctypes.c_void_p(), ctypes.c_void_p()
        if self._lib.ig_start(self._handle, self._listen.encode(), ctypes.byref(addr), ctypes.byref(err)):
            raise OSError(_take(self._lib, err))
        self.address = _take(self._lib, addr)
        return self.address

    @property
    def url(self):
        """http://host:port of the running gateway."""
        return f"http://{self.address}" if self.address else None

    def stop(self, timeout=30.0):
        """Drains the gateway: in-flight requests get up to timeout seconds, then Python calls
        still running get as long again; new requests are refused. Safe to call twice."""
        if not self._handle:
            return
        h, self._handle = self._handle, 0
        err = ctypes.c_void_p()
        rc = self._lib.ig_stop(h, int(timeout * 1000), ctypes.byref(err))
        self._lib.ig_close(h)
        _live.discard(self)
        if rc:
            raise RuntimeError(_take(self._lib, err))

    def serve_forever(self):
        """Starts (if needed) and serves until SIGINT or SIGTERM, then stops."""
        if self.address is None:
            self.start()
        done = threading.Event()
        old = {}
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                old[s] = signal.signal(s, lambda *_: done.set())
        try:
            while not done.wait(0.5):
                pass
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.stop()

    def __enter__(self):
        if self.address is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- models -----------------------------------------------------------------------------

    def register_tensor_model(self, name, inputs, outputs, fn, max_batch_size=0):
        """Serves fn as a KServe tensor model. inputs and outputs are lists of
        {"name", "datatype" (KServe: "FP32", "INT64", "BYTES", ...), "shape" (-1: any)}; with
        max_batch_size > 0 shapes exclude the batch dimension, as in Triton. fn(inputs) gets a
        dict name -> array (NumPy arrays when NumPy is importable, else memoryviews shaped like
        the tensor; BYTES as lists of bytes) that are valid only during the call, and returns a
        dict name -> NumPy array, memoryview, or (nested) list. An exception becomes the
        request's error, with its message; raise InferError to choose the code."""
        if not callable(fn):
            raise TypeError("fn must be callable")
        spec = {"name": name, "max_batch_size": int(max_batch_size),
                "inputs": [_decl(d) for d in inputs], "outputs": [_decl(d) for d in outputs]}
        declared = {d["name"]: d["datatype"] for d in spec["outputs"]}
        lib = self._lib

        def call(cid, hdr, hdr_len, data, lens, n):
            try:
                head = _decode(ctypes.string_at(hdr, hdr_len).decode())
                args = {}
                for i, t in enumerate(head["inputs"]):
                    size = lens[i]
                    buf = _memory(data[i], size) if size else bytearray()
                    args[t["name"]] = _input_value(t["datatype"], t["shape"], buf)
                out = fn(args)
                if not isinstance(out, dict):
                    raise TypeError(f"model '{name}' returned {type(out).__name__}, want a dict of outputs")
                wanted = head.get("outputs") or None
                for oname, value in out.items():
                    if wanted is not None and oname not in wanted:
                        continue
                    dt, shape, buf = _output_value(oname, declared.get(oname, "BYTES"), value)
                    ptr, nbytes, keep = _address(buf)
                    cshape = struct.pack("<%dq" % len(shape), *shape)
                    if lib.ig_output(cid, str(oname).encode(), dt.encode(), cshape, len(shape), ptr, nbytes):
                        return 1
                    del keep
                return 0
            except BaseException as e:  # noqa: BLE001 - every failure is the request's error
                code = e.code if isinstance(e, InferError) else "INTERNAL"
                lib.ig_fail(cid, str(code).encode(), f"model '{name}': {_message(e)}".encode("utf-8", "replace"))
                return 1

        cb = _TENSOR_FN(call)
        err = ctypes.c_void_p()
        body = json.dumps(spec).encode()
        if lib.ig_register_tensor(self._live_handle(), body, len(body), ctypes.cast(cb, ctypes.c_void_p), ctypes.byref(err)):
            raise ValueError(_take(lib, err))
        self._callbacks.append(cb)

    def register_llm(self, name, fn):
        """Serves fn as an LLM on /v1/chat/completions and /v1/completions (streaming too) and,
        through the KServe bridge, as a KServe model with text_input/text_output. fn(prompt)
        gets the prompt (a completion's prompt, or a chat's last user message) and returns a str
        or yields str chunks; fn(prompt, request) also gets the OpenAI request body as a dict."""
        if not callable(fn):
            raise TypeError("fn must be callable")
        try:
            params = inspect.signature(fn).parameters.values()
            two = len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2 or \
                any(p.kind == p.VAR_POSITIONAL for p in params)
        except (TypeError, ValueError):
            two = False
        lib = self._lib

        def call(cid, body, n, stream):
            try:
                req = json.loads(ctypes.string_at(body, n))
                prompt = _prompt(req)
                out = fn(prompt, req) if two else fn(prompt)
                if isinstance(out, str):
                    chunks = (out,)
                elif isinstance(out, (bytes, dict)) or not hasattr(out, "__iter__"):
                    raise TypeError(f"model '{name}' returned {type(out).__name__}, want str or an iterable of str")
                else:
                    chunks = out
                try:
                    for c in chunks:
                        if not isinstance(c, str):
                            raise TypeError(f"model '{name}' yielded {type(c).__name__}, want str")
                        b = c.encode("utf-8")
                        if lib.ig_emit(cid, b, len(b)):
                            break  # the client is gone
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
                return 0
            except BaseException as e:  # noqa: BLE001
                lib.ig_fail(cid, b"INTERNAL", f"model '{name}': {_message(e)}".encode("utf-8", "replace"))
                return 1

        cb = _LLM_FN(call)
        err = ctypes.c_void_p()
        if lib.ig_register_llm(self._live_handle(), str(name).encode(), ctypes.cast(cb, ctypes.c_void_p), ctypes.byref(err)):
            raise ValueError(_take(lib, err))
        self._callbacks.append(cb)

    def register_backend(self, model_name, url, model_type="chat", backend_type=None, priority=0,
                         ttl=None, tensor_model_config=None):
        """Registers a remote backend as RegistryService.Register does (model_type: chat,
        completions, embeddings or tensor; backend_type: vllm, openai, ollama or kserve). The
        gateway keeps the lease alive until deregister_backend or stop. Returns the lease id."""
        backend = {"modelName": model_name, "url": url, "modelType": "MODEL_TYPE_" + model_type.upper(),
                   "priority": int(priority)}
        if backend_type:
            backend["backendType"] = "BACKEND_TYPE_" + backend_type.upper()
        if tensor_model_config is not None:
            backend["tensorModelConfig"] = tensor_model_config
        req = {"backend": backend}
        if ttl is not None:
            req["ttl"] = f"{float(ttl)}s"
        body = json.dumps(req).encode()
        out, err = ctypes.c_void_p(), ctypes.c_void_p()
        if self._lib.ig_register_backend(self._live_handle(), body, len(body), ctypes.byref(out), ctypes.byref(err)):
            raise ValueError(_take(self._lib, err))
        return json.loads(_take(self._lib, out))["leaseId"]

    def deregister_backend(self, lease_id):
        """Ends a lease register_backend took."""
        err = ctypes.c_void_p()
        if self._lib.ig_deregister_backend(self._live_handle(), lease_id.encode(), ctypes.byref(err)):
            raise ValueError(_take(self._lib, err))

    def _live_handle(self):
        if not self._handle:
            raise RuntimeError("the gateway is stopped")
        return self._handle


def _decl(d):
    if not isinstance(d, dict) or not {"name", "datatype", "shape"} <= d.keys():
        raise ValueError(f"tensor declaration {d!r} needs name, datatype and shape")
    return {"name": str(d["name"]), "datatype": str(d["datatype"]).upper(), "shape": [int(x) for x in d["shape"]]}


def _text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _prompt(req):
    if "messages" in req:
        for m in reversed(req.get("messages") or []):
            if isinstance(m, dict) and m.get("role") == "user":
                return _text(m.get("content"))
        return ""
    p = req.get("prompt", "")
    if isinstance(p, list):
        p = p[0] if p and isinstance(p[0], str) else ""
    return p if isinstance(p, str) else ""


# Gateways not stopped yet. The references are strong on purpose: Go keeps serving a gateway
# whose Python object was dropped, and must never call a collected ctypes callback. Those still
# running at interpreter exit are stopped while Python can still run their in-flight calls, so
# no Go thread calls into a finalizing interpreter.
_live = set()


@atexit.register
def _stop_all():
    for gw in list(_live):
        try:
            gw.stop(timeout=5.0)
        except Exception as e:  # noqa: BLE001
            print(f"infergate: stopping at exit: {e}", file=sys.stderr)
