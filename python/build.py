#!/usr/bin/env python3
"""Builds libinfergate.so, the Go gateway as a C shared library, next to the Python package.

    python3 python/build.py            # from anywhere in the repository
    python3 python/build.py -o DIR/libinfergate.so

Needs Go (the module's version) and a C compiler (cgo). Nothing is downloaded beyond the Go
module cache the rest of the repository uses.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "infergate", "libinfergate.so"))
    args = ap.parse_args()
    env = dict(os.environ, CGO_ENABLED="1")
    cmd = ["go", "build", "-buildmode=c-shared", "-trimpath", "-o", os.path.abspath(args.output), "./bindings/cshared"]
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
