# emqproxy: the two commands a newcomer needs are `make run` and `make test`.
GO        ?= go
BIN       := bin/emqproxy
MODULE_SO := stand/module/build/emq.so
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The whole suite; packages run in parallel, two at a time on a 2-core machine.
TEST_FLAGS ?= -p 2 -timeout 12m
FUZZTIME  ?= 10s
# Minimizing a new input is bounded too, so it cannot outlast FUZZTIME (an
# unbounded minimization that straddles the end is reported as a failure).
FUZZFLAGS ?= -fuzztime $(FUZZTIME) -fuzzminimizetime 1s

.PHONY: all deps module build run test fuzz lint bench demo clean

all: build

deps:
	@./scripts/deps.sh

module: deps
	@$(MAKE) --no-print-directory -C stand/module

build: deps module
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/emqproxy

# Starts a local module node (127.0.0.1:6390) and the proxy in front of it
# (127.0.0.1:6380) with deploy/examples/local.yaml. Ctrl-C stops both.
run: build
	@./scripts/run-local.sh

# The whole suite against real servers the tests start themselves: vet,
# unit and integration tests, the race detector on the concurrent packages,
# and each fuzz target for a bounded time. CI runs exactly this.
test: deps module
	$(GO) vet ./...
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) test -race $(TEST_FLAGS) ./capture/... ./proxy/... ./fence/... ./admin/... ./stand/legacy/... ./e2e/...
	@$(MAKE) --no-print-directory fuzz

fuzz:
	$(GO) test ./proxy -run '^$$' -fuzz '^FuzzGuard$$' $(FUZZFLAGS)
	$(GO) test ./rewrite -run '^$$' -fuzz '^FuzzDecide$$' $(FUZZFLAGS)
	$(GO) test ./shamap -run '^$$' -fuzz '^FuzzParse$$' $(FUZZFLAGS)
	$(GO) test ./pin -run '^$$' -fuzz '^FuzzElixir$$' $(FUZZFLAGS)

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 ./...

# The seed's transition (enqueue JOB0KHTOWnGLuC on quotes, claim it) through
# the proxy: what the client saw, what the module node holds, the audit records.
demo: build
	$(GO) run ./stand/cmd/demo --emqproxy $(BIN)

bench: build
	@./bench/run.sh

clean:
	rm -rf bin stand/module/build .run
