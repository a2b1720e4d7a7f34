#!/usr/bin/env bash
# make test's Valkey step, run once before the tests. It says in one line
# which Valkey the tests' Valkey leg will run on, or why it is skipped:
#   VALKEY_SERVER=/path/to/valkey-server   that binary, as is;
#   VALKEY_TARBALL=/path/to/valkey-X.tar.gz  built once per machine into
#       ~/.cache/emqproxy/valkey-<sha256 prefix>/ (or under $XDG_CACHE_HOME),
#       about two minutes on two cores the first time; a build that failed
#       before is tried again here (the tests themselves never retry it);
#   neither: the Valkey leg is skipped, everything else runs.
# A failed build does not stop make test: the reason is printed here, and
# every Valkey test reports itself skipped with it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${VALKEY_SERVER:-}" ]; then
  echo "valkey: VALKEY_SERVER=$VALKEY_SERVER ($("$VALKEY_SERVER" --version 2>&1 || true))"
elif [ -n "${VALKEY_TARBALL:-}" ]; then
  if [ ! -f "$VALKEY_TARBALL" ]; then
    echo "valkey: VALKEY_TARBALL=$VALKEY_TARBALL does not exist; the Valkey leg will be skipped"
    exit 0
  fi
  echo "valkey: building from $VALKEY_TARBALL unless cached (about two minutes on two cores)"
  if bin=$(go run ./stand/cmd/emqnode --build-valkey "$VALKEY_TARBALL"); then
    echo "valkey: $bin ($("$bin" --version))"
  else
    echo "valkey: the build failed (reason above); the Valkey tests will report themselves skipped"
  fi
else
  echo "valkey: neither VALKEY_SERVER nor VALKEY_TARBALL is set; the Valkey leg is skipped (make test VALKEY_TARBALL=../shared/vendor/valkey-8.0.1.tar.gz runs it)"
fi
