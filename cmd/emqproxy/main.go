// Command emqproxy is a sidecar that lets unchanged wire-4 EchoMQ clients run
// against a node of the native job-core module: pinned script calls leave
// as EMQ.<VERB> with the identical tail, declared reads and ordinary commands
// pass, and every other script is refused.
//
// This package is thin on purpose: flags, configuration, start, signals.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		var ec exitCode
		if asExitCode(err, &ec) {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "emqproxy:", err)
		os.Exit(1)
	}
}
