#!/usr/bin/env bash
# alternate.sh OLDREV LIST [ROUNDS]: old and new test binaries of the same benchmarks, alternated in
# one run, for a refactor's before/after table (docs/performance.md). OLDREV is checked out in a
# worktree under /tmp; "new" is this work tree. Each line of LIST is
#   name  old-package-path  new-package-path  benchmark-regexp
# (the paths differ when the refactor moved the package). Output: "old|new name Benchmark... "
# lines on stdout, one per benchmark per round; BENCHTIME (default 1s) sets -test.benchtime.
# Run it on a quiet machine: the two binaries share the noise, but not its swings.
set -euo pipefail
old_rev=$1 list=$2 rounds=${3:-3}
root=$(git rev-parse --show-toplevel)
old=/tmp/benchcmp-old-$(git -C "$root" rev-parse --short "$old_rev")
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
[ -d "$old" ] || git -C "$root" worktree add -f "$old" "$old_rev" >/dev/null
grep -v '^#' "$list" | while read -r name op np re; do
  [ -n "$name" ] || continue
  (cd "$old" && go test -c -o "$bin/$name-old.test" "./$op")
  (cd "$root" && go test -c -o "$bin/$name-new.test" "./$np")
done
for _ in $(seq "$rounds"); do
  grep -v '^#' "$list" | while read -r name op np re; do
    [ -n "$name" ] || continue
    for v in old new; do
      if [ $v = old ]; then dir=$old/$op; else dir=$root/$np; fi
      (cd "$dir" && "$bin/$name-$v.test" -test.run '^$' -test.bench "$re" -test.benchmem -test.count 1 \
        -test.benchtime "${BENCHTIME:-1s}" | grep '^Benchmark' | sed "s/^/$v $name /")
    done
  done
done
