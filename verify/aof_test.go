package verify

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

func cmd(args ...string) string {
	out := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		out += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return out
}

func TestAOFFilesFromManifest(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "appendonlydir")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(sub, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("appendonly.aof.manifest", manifest)
	write("appendonly.aof.1.base.rdb", "REDIS0010 binary")
	write("appendonly.aof.1.incr.aof", cmd("ZADD", "emq:{vB1}:active", "17", "J1")+cmd("SET", "k", "EMQ.CLAIM"))
	write("appendonly.aof.2.incr.aof", cmd("MULTI")+cmd("emq.claim", "2", "emq:{vB2}:pending")+cmd("EXEC"))

	files, err := aofFiles(dir, "appendonlydir", "appendonly.aof")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || filepath.Base(files[0]) != "appendonly.aof.1.incr.aof" {
		t.Fatalf("files %v: want the two incr files, not the rdb base", files)
	}
	names, hits, err := scanAOF(files, "{vB")
	if err != nil {
		t.Fatal(err)
	}
	// A payload holding "EMQ.CLAIM" is not a record; the lower-case command is.
	if !slices.Equal(names, []string{"emq.claim"}) || hits != 2 {
		t.Errorf("names %v hits %d, want [emq.claim] and 2", names, hits)
	}
}

func TestAOFSingleFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "appendonly.aof"), []byte(cmd("HSET", "emq:{vB1}:job:J1", "state", "done")), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := aofFiles(dir, "", "appendonly.aof")
	if err != nil || len(files) != 1 {
		t.Fatalf("files %v err %v", files, err)
	}
	names, hits, err := scanAOF(files, "{vB")
	if err != nil || len(names) != 0 || hits != 1 {
		t.Errorf("names %v hits %d err %v", names, hits, err)
	}
}
