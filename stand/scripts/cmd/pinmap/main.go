// Command pinmap writes the pinned map (stand/map.yaml) of the stand's
// scripts: `go run ./stand/scripts/cmd/pinmap -out stand/map.yaml`.
// With -check it writes nothing and exits 1 when the file is out of date.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

func main() {
	out := flag.String("out", "stand/map.yaml", "file to write")
	check := flag.Bool("check", false, "only check that the file is up to date")
	flag.Parse()

	data, err := scripts.PinnedMap()
	if err == nil {
		_, err = shamap.Parse(data)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pinmap:", err)
		os.Exit(1)
	}
	if *check {
		old, err := os.ReadFile(*out)
		if err != nil || !bytes.Equal(old, data) {
			fmt.Fprintf(os.Stderr, "pinmap: %s is out of date; run go generate ./stand/scripts\n", *out)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "pinmap:", err)
		os.Exit(1)
	}
}
