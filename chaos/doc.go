// Package chaos is the seeded fault campaign of issue 31: a fleet of
// sidecars in front of real nodes (two module master sets under Sentinel,
// one scripts node), legacy workers driving the job core through them, a
// nemesis injecting faults on a schedule drawn from a seed, a history of
// every call and every fault written as it happens (JSON lines), and a
// checker that reads the history and the nodes' final state.
//
// Why one package, beside stand/ rather than inside it or in verify/:
// verify/ is the differential harness, an operator tool shipped in the
// binary; the campaign is a test of the whole fleet and is never shipped.
// stand/ holds the building blocks (nodes, the legacy client) that every
// test uses; the campaign composes them with processes of the emqproxy
// binary and a fault-injecting relay, which no other test needs. The
// checker (check.go) is kept free of any I/O so it can be unit-tested on
// hand-built histories, including ones that break each property.
//
// Files:
//
//   - history.go: the event record, the writer (one JSON line per event,
//     written and flushed as it happens) and the reader.
//   - check.go: the checker, a pure function of the history and the final
//     state.
//   - fleet.go: the nodes, sentinels, sidecars and relays, on free
//     loopback ports; toxilog.go hands the relays (toxiproxy) the logger
//     type their constructor requires, writing through to zap.
//   - workers.go: the legacy workers and the final drain.
//   - nemesis.go: the schedule of faults drawn from the seed, and their
//     injection.
//   - stalls.go: the faults of a stalled mover and of a blocked client, and
//     the removal of the moves' leftovers at the end.
//   - campaign.go: one campaign from start to report; report.go writes it.
//
// The checker judges per-job invariants (an acknowledged job's presence,
// its one set, completes, leases, replies) directly, in one pass over the
// history, rather than checking linearizability against a model of the
// whole queue with porcupine: the properties asked are per job, a
// campaign's history holds millions of calls from sixteen concurrent
// workers (a whole-queue model would make the search explode), and a
// direct check names the job and prints the lines that show each
// violation.
//
// The campaign runs as a test: TestCampaignShort (about a minute, a fixed
// seed and a fresh one) in `make test`, and TestCampaignLong, run by
// `make chaos DURATION=30m SEED=...`, which writes its report;
// TestRecheck judges a kept history and final state again.
package chaos
