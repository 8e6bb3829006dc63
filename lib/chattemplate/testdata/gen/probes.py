"""Renders probes.json's small templates with Python's Jinja2 set up as transformers'
apply_chat_template sets it up, into ../jinja2_probes.json: what TestJinja2Probes compares the Go
package with, feature by feature (whitespace control, filters, tests, loops, tojson, ...).

    python3 probes.py
"""
import json
from datetime import datetime, timezone
from pathlib import Path

import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = Path(__file__).resolve().parent
now = datetime(2026, 1, 15, 9, 5, 7, tzinfo=timezone.utc)


class Raise(Exception):
    pass


def raise_exception(message):
    raise Raise(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
variables = {"messages": [{"role": "user", "content": "hi é"}]}

out = []
for name, src in json.load(open(here / "probes.json")):
    r = {"name": name, "template": src}
    try:
        r["output"] = env.from_string(src).render(**variables)
    except Raise as e:
        r["raise"] = str(e)
    except Exception as e:
        r["error"] = f"{type(e).__name__}: {e}"
    out.append(r)
(here.parent / "jinja2_probes.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
print(len(out), "probes")
