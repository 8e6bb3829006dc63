"""Renders the golden corpus with Python's Jinja2 set up as transformers' apply_chat_template sets
it up (what vLLM runs), and reports where @huggingface/jinja's goldens differ from it.

    node gen.mjs --contexts /tmp/contexts.json && python3 crosscheck.py /tmp/contexts.json

Needs jinja2 (3.1); nothing else. Not part of the Go tests: a check on the reference itself.
"""
import gzip
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = Path(__file__).resolve().parent


class Raise(Exception):
    pass


def main(path):
    data = json.load(open(path))
    now = datetime.fromisoformat(data["now"].replace("Z", "+00:00")).astimezone(timezone.utc)
    golden = json.load(gzip.open(here.parent / "golden.json.gz"))
    want = {(r["template"], r["case"]): r for r in golden["results"]}

    def raise_exception(message):
        raise Raise(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)

    compiled = {}
    same = differ = 0
    for c in data["contexts"]:
        name = c["file"]
        if name not in compiled:
            compiled[name] = env.from_string((here.parent / "templates" / name).read_text())
        key = (c["template"], c["case"])
        try:
            got = {"output": compiled[name].render(**c["context"])}
        except Raise as e:
            got = {"raise": str(e)}
        except (TemplateError, TypeError, ValueError) as e:
            got = {"error": f"{type(e).__name__}: {e}"}
        w = {k: v for k, v in want[key].items() if k in ("output", "raise", "error")}
        if got == w:
            same += 1
            continue
        differ += 1
        print(f"== {key[0]}/{key[1]}")
        print("  @huggingface/jinja:", json.dumps(w, ensure_ascii=False)[:600])
        print("  Jinja2 (transformers):", json.dumps(got, ensure_ascii=False)[:600])
    print(f"{same} identical, {differ} different")


if __name__ == "__main__":
    main(sys.argv[1])
