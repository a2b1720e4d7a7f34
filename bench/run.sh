#!/usr/bin/env bash
# The benchmark command (`make bench`): installs the tools it needs from
# Debian when missing (scripts/deps.sh: redis-benchmark, nutcracker, ...),
# builds the load generator, the bench proxy and the runner, and runs every
# benchmark side by side in one run. Results: bench/results/<date>-<sha>.md
# and bench/results/latest.md. Extra arguments go to the runner, e.g.
#   ./bench/run.sh --reps 1 --mix-duration 2s      # a quick look, not a result
# Sections 1, 1c and 2 run in two layouts, the node pinned to a core of its
# own (taskset, util-linux) and everything shared (bench/README.md,
# "Layouts"): 7-11 minutes on a 2-core machine with one layout, about 7 more
# with both (estimated; each report records its run's time).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh # redis-server, redis-benchmark, nutcracker, gcc, the Go modules

GO=${GO:-go}
mkdir -p bin
# The binary under test is always the working tree's (as `make build` builds
# it); if it does not build, the runner falls back to bench/cmd/proxyd for the
# emqproxy rows and the results say so.
VERSION=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
$GO build -ldflags "-X main.version=$VERSION" -o bin/emqproxy ./cmd/emqproxy ||
  { echo "bench: cmd/emqproxy does not build"; rm -f bin/emqproxy; }
$GO build -o bin/jobmix ./bench/cmd/jobmix
$GO build -o bin/proxyd ./bench/cmd/proxyd
$GO build -o bin/goforward ./bench/cmd/goforward
$GO build -o bin/epollforward ./bench/cmd/epollforward
$GO build -o bin/benchrun ./bench/cmd/benchrun
exec bin/benchrun "$@"
