# emqproxy: the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       := bin/emqproxy
MODULE_SO := stand/module/build/emq.so
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The whole suite; packages run in parallel, two at a time on a 2-core machine.
# Only tests whose time goes to timers (Sentinel failovers, a frozen
# replica's WAIT timeouts, a move's retry back-off) call t.Parallel, so
# four of them at once cost little CPU and overlap their waits.
TEST_FLAGS ?= -p 2 -parallel 4 -timeout 12m
# Each fuzz target runs for a number of executions (about 10 s each on a
# 2-core machine), not a duration: Go 1.26's coordinator can report a
# spurious "context deadline exceeded" failure when a -fuzztime duration
# ends while a worker is mid-call (go.dev/issue/75804, fixed in Go 1.27).
# Minimizing a new input is bounded by a count too.
FUZZSCALE ?= 1
FUZZFLAGS ?= -fuzzminimizetime 2000x

# The tests run on every server of the stand's table: Debian's redis-server,
# and Valkey when VALKEY_SERVER names a valkey-server or VALKEY_TARBALL a
# Valkey source tarball (built once per machine into ~/.cache/emqproxy, not
# into the repository). With neither, the Valkey leg is skipped with one
# line. Relative paths are taken from the repository root. Both are passed
# to the tests through the environment, as make passes command-line
# variables:
#   make test VALKEY_TARBALL=../shared/vendor/valkey-8.0.1.tar.gz
#   make test VALKEY_SERVER=/usr/local/bin/valkey-server

.PHONY: all deps module valkey build run test check fuzz lint bench chaos demo clean

all: build

deps:
	@./scripts/deps.sh

module: deps
	@$(MAKE) --no-print-directory -C stand/module

# Builds (or finds) the Valkey of VALKEY_TARBALL once, before the test
# packages start, so they never build it concurrently; says which Valkey the
# tests will use, or why its leg is skipped.
valkey: deps
	@./scripts/valkey.sh

build: deps module
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/emqproxy

# Starts a local module node (127.0.0.1:6390) and the proxy in front of it
# (127.0.0.1:6380) with deploy/examples/local.yaml. Ctrl-C stops both.
# NODE_SERVER=/path/to/valkey-server runs the node on that server instead
# of Debian's redis-server.
run: build
	@./scripts/run-local.sh

# The packages with concurrency of their own: their tests run under the
# race detector. Every other package runs once without it; no package runs
# twice.
# Listed longest first: go test starts the packages in this order, and the
# long ones (proxy, e2e, control) would otherwise start last on one core.
RACE_PKGS := ./proxy/... ./e2e/... ./control/... ./discovery/... ./capture/... ./fence/... ./admin/... ./stand/legacy/...

# The session suites run a second time with the proxies on a Unix socket
# (EMQPROXY_TEST_LISTEN=unix; proxy/helpers_test.go): isolation and
# shares, fidelity against the server, pub/sub, transcripts, routes.
UNIX_SUITES := Share|Isolat|Fidelity|Subscribe|Transcript|Route|Unix
# The packages outside the race leg run one at a time, beside it.
PLAIN_FLAGS ?= -p 1 -parallel 4 -timeout 12m

# The whole suite against real servers the tests start themselves: vet,
# then scripts/test.sh: the concurrent packages under the race detector
# and, at the same time, every other package once and the session suites
# over a Unix socket; then each fuzz target for a bounded count. Every leg
# runs even when one before it failed, so one run reports every failure;
# it fails if any leg did. CI runs exactly this.
test: deps module valkey
	$(GO) vet ./...
	@GO="$(GO)" MAKE="$(MAKE)" TEST_FLAGS="$(TEST_FLAGS)" PLAIN_FLAGS="$(PLAIN_FLAGS)" \
		RACE_PKGS="$(RACE_PKGS)" UNIX_SUITES="$(UNIX_SUITES)" ./scripts/test.sh

# The inner loop: formatting, vet, and every test that does not take
# seconds of real time (-short skips the failovers, the moves under load,
# the campaign: node.Long). Not a substitute for make test.
check: deps module
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -short $(TEST_FLAGS) ./...

fuzz:
	$(GO) test ./resp -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime $$((90000 * $(FUZZSCALE)))x $(FUZZFLAGS)
	$(GO) test ./rewrite -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $$((300000 * $(FUZZSCALE)))x $(FUZZFLAGS)
	$(GO) test ./shamap -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $$((300000 * $(FUZZSCALE)))x $(FUZZFLAGS)
	$(GO) test ./pin -run '^$$' -fuzz '^FuzzElixir$$' -fuzztime $$((180000 * $(FUZZSCALE)))x $(FUZZFLAGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 ./...

# The long fault campaign (chaos/): DURATION of faults (30m when unset),
# SEED (a fresh one when unset: the report starts with it and with the
# command that reruns it), KINDS ("all", "short" or a comma-separated list
# of fault kinds). The report goes to REPORT (bench/results/<date>-<time>-<sha>-chaos.md);
# the history and the fleet's logs stay under CHAOS_DIR.
DURATION  ?= 30m
SEED      ?=
KINDS     ?= all
CHAOS_DIR ?= $(CURDIR)/.run/chaos
CHAOS_STAMP := $(shell date -u +%Y-%m-%d-%H%M)-$(shell git rev-parse --short HEAD 2>/dev/null)
REPORT    ?= $(CURDIR)/bench/results/$(CHAOS_STAMP)-chaos.md
chaos: deps module
	@mkdir -p $(CHAOS_DIR) $(dir $(REPORT))
	EMQCHAOS_DURATION=$(DURATION) EMQCHAOS_SEED=$(SEED) EMQCHAOS_KINDS=$(KINDS) EMQCHAOS_DIR=$(CHAOS_DIR) EMQCHAOS_REPORT=$(REPORT) \
		$(GO) test ./chaos -run '^TestCampaignLong$$' -count=1 -v -timeout $$(( $$(echo $(DURATION) | sed -E 's/m$$/*60/; s/s$$//; s/h$$/*3600/') * 2 + 900 ))s

# The seed's transition (enqueue JOB0KHTOWnGLuC on quotes, claim it) through
# the proxy: what the client saw, what the module node holds, the audit records.
demo: build
	$(GO) run ./stand/cmd/demo --emqproxy $(BIN)

bench: build
	@./bench/run.sh

clean:
	rm -rf bin stand/module/build .run
