#!/usr/bin/env bash
# make test's legs, after vet (the Makefile passes GO, TEST_FLAGS,
# PLAIN_FLAGS, RACE_PKGS and UNIX_SUITES):
#
#   race   the packages with concurrency of their own, under the race
#          detector (TEST_FLAGS: two packages at a time);
#   plain  every other package once, then the session suites again with the
#          proxies on a Unix socket (PLAIN_FLAGS: one package at a time);
#   fuzz   each fuzz target for a bounded count (make fuzz).
#
# race and plain run at once: much of either leg's time goes to timers (a
# Sentinel's down-after, a WAIT's timeout, a move's back-off) and to the
# servers the tests start, not to the test binaries, so one leg fills the
# cores the other leaves idle. Each line a leg prints is prefixed with its
# name. fuzz runs after both, on cores of its own. Every leg runs even when
# another failed, so one run reports every failure; the script fails if any
# leg did, and names which.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
read -r -a test_flags <<<"${TEST_FLAGS:--p 2 -parallel 4 -timeout 12m}"
read -r -a plain_flags <<<"${PLAIN_FLAGS:--p 1 -parallel 4 -timeout 12m}"
read -r -a race_pkgs <<<"${RACE_PKGS:?RACE_PKGS is set by the Makefile}"
unix_suites=${UNIX_SUITES:?UNIX_SUITES is set by the Makefile}

# label prefixes each line of a leg's output with the leg's name.
label() { sed -u "s/^/$1 | /"; }

race_leg() {
  echo "+ $GO test -race ${test_flags[*]} ${race_pkgs[*]}"
  "$GO" test -race "${test_flags[@]}" "${race_pkgs[@]}"
}

plain_leg() {
  local status=0 others
  others=$("$GO" list ./... | grep -vxF "$("$GO" list "${race_pkgs[@]}")")
  echo "+ $GO test ${plain_flags[*]} <every package not in the race leg>"
  # shellcheck disable=SC2086 # one package path per word
  "$GO" test "${plain_flags[@]}" $others || status=1
  echo "+ EMQPROXY_TEST_LISTEN=unix $GO test -short ${plain_flags[*]} ./proxy -run '$unix_suites'"
  EMQPROXY_TEST_LISTEN=unix "$GO" test -short "${plain_flags[@]}" ./proxy -run "$unix_suites" || status=1
  return $status
}

start=$SECONDS
(race_leg 2>&1 | label race) &
race_pid=$!
(plain_leg 2>&1 | label plain) &
plain_pid=$!
failed=()
wait $race_pid || failed+=(race)
wait $plain_pid || failed+=(plain)
echo "test: race and plain legs done in $((SECONDS - start)) s"
start=$SECONDS
"${MAKE:-make}" --no-print-directory fuzz 2>&1 | label fuzz || failed+=(fuzz)
echo "test: fuzz leg done in $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "make test: FAILED in the ${failed[*]} leg(s) (the failures are above, each line prefixed with its leg)"
  exit 1
fi
