package verify

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// emqRecord matches an AOF command record whose name starts with EMQ.
var emqRecord = regexp.MustCompile(`(?i)\*[0-9]+\r\n\$[0-9]+\r\n(EMQ\.[A-Z0-9_]*)\r\n`)

// configGet reads one CONFIG GET value ("" when the server has no such
// parameter).
func (h *harness) configGet(ctx context.Context, name string) (string, error) {
	ss, err := h.ex.c.Do(ctx, h.ex.c.B().ConfigGet().Parameter(name).Build()).AsStrSlice()
	if err != nil {
		return "", fmt.Errorf("%w: CONFIG GET %s: %v", ErrServer, name, err)
	}
	if len(ss) < 2 {
		return "", nil
	}
	return ss[1], nil
}

// aofFiles lists the AOF files of the server: the parts named by the
// manifest in <dir>/<appenddirname> (Redis 7+, Valkey), or the single
// <dir>/<appendfilename> of older servers. RDB snapshots are left out.
func aofFiles(dir, subdir, name string) ([]string, error) {
	manifest := filepath.Join(dir, subdir, name+".manifest")
	if subdir != "" {
		if f, err := os.Open(manifest); err == nil {
			defer f.Close()
			var files []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				for i := 0; i+1 < len(fields); i += 2 {
					if fields[i] == "file" && !strings.HasSuffix(fields[i+1], ".rdb") {
						files = append(files, filepath.Join(dir, subdir, fields[i+1]))
					}
				}
			}
			return files, sc.Err()
		} else if !os.IsNotExist(err) {
			return nil, err
		}
	}
	single := filepath.Join(dir, name)
	if _, err := os.Stat(single); err != nil {
		return nil, err
	}
	return []string{single}, nil
}

// scanAOF returns the EMQ.* command names recorded in the files and how
// many times marker occurs in them.
func scanAOF(files []string, marker string) (names []string, hits int, err error) {
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, 0, err
		}
		for _, m := range emqRecord.FindAllSubmatch(data, -1) {
			names = append(names, string(m[1]))
		}
		hits += bytes.Count(data, []byte(marker))
	}
	slices.Sort(names)
	return slices.Compact(names), hits, nil
}

// checkAOF looks for EMQ.* records in the server's AOF. It is not run when
// AOF is off or its files cannot be read from here (a remote node).
func (h *harness) checkAOF(ctx context.Context) Check {
	chk := Check{Name: "no EMQ.* record in the AOF"}
	on, err := h.configGet(ctx, "appendonly")
	if err != nil {
		return chk.notRun(err.Error())
	}
	if on != "yes" {
		return chk.notRun("appendonly is off on the server")
	}
	dir, err := h.configGet(ctx, "dir")
	if err != nil {
		return chk.notRun(err.Error())
	}
	subdir, _ := h.configGet(ctx, "appenddirname")
	name, err := h.configGet(ctx, "appendfilename")
	if err != nil || name == "" {
		return chk.notRun("CONFIG GET appendfilename gave nothing")
	}
	// The native side's queues must show up: otherwise the files read are
	// not this server's, or nothing has been flushed yet (appendfsync
	// everysec), and an empty result would prove nothing.
	marker := "{v" + h.tag + "B"
	deadline := time.Now().Add(3 * time.Second)
	for {
		files, err := aofFiles(dir, subdir, name)
		if err != nil {
			return chk.notRun(fmt.Sprintf("the AOF in %s is not readable from here: %v", dir, err))
		}
		names, hits, err := scanAOF(files, marker)
		if err != nil {
			return chk.notRun(fmt.Sprintf("the AOF in %s is not readable from here: %v", dir, err))
		}
		switch {
		case len(names) > 0:
			chk.Status = Differing
			chk.Detail = fmt.Sprintf("found %s in %s", strings.Join(names, ", "), strings.Join(files, ", "))
			return chk
		case hits > 0:
			chk.Status = Equal
			chk.Detail = fmt.Sprintf("%d files read, %d native-side key mentions, no EMQ.* record", len(files), hits)
			return chk
		case time.Now().After(deadline):
			return chk.notRun(fmt.Sprintf("the AOF files %s hold none of this run's writes", strings.Join(files, ", ")))
		}
		time.Sleep(50 * time.Millisecond) // waiting for an fsync we cannot observe otherwise
	}
}
