package capture

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/shamap"
)

// redacted writes recs to a fresh redacted capture and returns its records
// and the bytes of its file.
func redacted(t *testing.T, recs ...*Record) ([]Record, []byte) {
	t.Helper()
	files := write(t, Options{Dir: t.TempDir(), Redact: true}, recs...)
	if len(files) != 1 || !files[0].Header.Redacted {
		t.Fatalf("%d files, header %+v", len(files), files[0].Header)
	}
	raw, err := os.ReadFile(files[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range files[0].Records {
		if !r.Redacted() {
			t.Errorf("record %d not flagged redacted", i+1)
		}
	}
	return files[0].Records, raw
}

func isHex(s []byte) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// A pinned call keeps its structure and loses its payloads; equal payloads
// get equal stand-ins, in the call that wrote one and the reply that
// returned it.
func TestRedactionOfCalls(t *testing.T) {
	claim := &Record{Seq: 2, Queue: "q", Script: "claim2", Token: "CLAIM",
		Args:  args("EVALSHA", "007d636ab0ba715dff227dd5bb8ea895fef9ac9e", "2", "emq:{q}:pending", "emq:{q}:active", "30000"),
		Reply: []byte("*3\r\n$2\r\nJ1\r\n$13\r\nsecret-stuff!\r\n:1\r\n")}
	claim.SetPayload((&shamap.Script{Verb: "CLAIM"}).Payload())
	fail := &Record{Seq: 3, Queue: "q", Script: "fail", Token: "FAIL",
		Args:  args("EVALSHA", "c09d2d7c77bdac3a17b9aece32bd0abbb5fc6b67", "4", "a", "b", "c", "d", "J1", "card declined", "3", "100"),
		Reply: []byte(":0\r\n")}
	fail.SetPayload((&shamap.Script{Verb: "FAIL"}).Payload())
	// A script's error reply may quote what it was given.
	failed := enqueueRecord(4, "J2", "x")
	failed.Reply = []byte("-ERR user_script:1: bad payload card-4242 script: 7750f40b\r\n")
	rs, raw := redacted(t, enqueueRecord(1, "J1", "secret-stuff!"), claim, fail, failed)
	for _, secret := range []string{"secret-stuff!", "card declined", "card-4242", "bad payload"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("%q is in the capture", secret)
		}
	}
	standIn := rs[0].Args[6]
	if len(standIn) != 13 || !isHex(standIn) || string(rs[0].Args[5]) != "J1" || string(rs[0].Args[3]) != "emq:{q}:job:J1" {
		t.Errorf("ENQUEUE args %q", rs[0].Args)
	}
	if want := "*3\r\n$2\r\nJ1\r\n$13\r\n" + string(standIn) + "\r\n:1\r\n"; string(rs[1].Reply) != want || rs[1].ShapeOnly() {
		t.Errorf("CLAIM reply %q (shape only %v), want %q", rs[1].Reply, rs[1].ShapeOnly(), want)
	}
	if got := rs[2].Args[8]; len(got) != len("card declined") || !isHex(got) || string(rs[2].Args[9]) != "3" || string(rs[2].Args[1]) != "c09d2d7c77bdac3a17b9aece32bd0abbb5fc6b67" {
		t.Errorf("FAIL args %q", rs[2].Args)
	}
	if r := rs[3]; !strings.HasPrefix(string(r.Reply), "-ERR ") || len(r.Reply) != len(failed.Reply) || !r.ShapeOnly() {
		t.Errorf("error reply %q (shape only %v)", r.Reply, r.ShapeOnly())
	}
}

// A plain command on a queue's keys keeps its name, its keys and the job
// row's structure; every other argument and every content of its reply,
// RESP2 or RESP3, becomes a stand-in, and the reply is compared by shape.
func TestRedactionOfPlainCommands(t *testing.T) {
	plain := func(seq uint64, reply string, keys []int, a ...string) *Record {
		r := &Record{Seq: seq, Queue: "q", Args: args(a...), Reply: []byte(reply)}
		if keys != nil {
			r.SetKeys(1, keys)
		}
		return r
	}
	recs := []*Record{
		plain(1, ":2\r\n", []int{1}, "HSET", "emq:{q}:job:J9", "payload", "secret-stuff!", "state", "pending", "note", "s3cr3t-note"),
		plain(2, "+OK\r\n", []int{1}, "SET", "emq:{q}:blob", "s3cr3t-blob", "EX", "60"),
		plain(3, "$15\r\n1700000000000-0\r\n", []int{1}, "XADD", "emq:{q}:events", "*", "data", "s3cr3t-event"),
		plain(4, "$13\r\nsecret-stuff!\r\n", []int{1}, "HGET", "emq:{q}:job:J9", "payload"),
		// RESP3: a map, a verbatim string, a double; keys found without the
		// table (no SetKeys): the arguments that are the queue's keys.
		plain(5, "%2\r\n$7\r\npayload\r\n$13\r\nsecret-stuff!\r\n$5\r\nstate\r\n$7\r\npending\r\n", nil, "HGETALL", "emq:{q}:job:J9"),
		plain(6, "=15\r\ntxt:s3cr3t-verb\r\n", []int{1}, "GET", "emq:{q}:blob"),
		plain(7, ",3.14159\r\n", []int{1}, "ZSCORE", "emq:{q}:pending", "J9"),
		plain(8, "-WRONGTYPE Operation against s3cr3t-key\r\n", []int{1}, "GET", "emq:{q}:job:J9"),
		plain(9, "!20\r\nSYNTAX s3cr3t-syntax\r\n", []int{1}, "SET", "emq:{q}:blob", "x", "BOGUS"),
	}
	rs, raw := redacted(t, recs...)
	for _, secret := range []string{"secret-stuff!", "s3cr3t", "3.14159", "1700000000000"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("%q is in the capture", secret)
		}
	}
	hset := rs[0].Args
	if string(hset[0]) != "HSET" || string(hset[1]) != "emq:{q}:job:J9" || string(hset[2]) != "payload" ||
		string(hset[4]) != "state" || string(hset[5]) != "pending" || string(hset[6]) == "note" || !isHex(hset[3]) {
		t.Errorf("HSET args %q", hset)
	}
	if set := rs[1].Args; string(set[1]) != "emq:{q}:blob" || string(set[3]) == "EX" || len(set[2]) != len("s3cr3t-blob") {
		t.Errorf("SET args %q", set)
	}
	if string(rs[1].Reply) != "+OK\r\n" || rs[1].ShapeOnly() {
		t.Errorf("SET reply %q (shape only %v): a status is kept", rs[1].Reply, rs[1].ShapeOnly())
	}
	if string(rs[3].Args[2]) != "payload" || !rs[3].ShapeOnly() {
		t.Errorf("HGET %q (shape only %v)", rs[3].Args, rs[3].ShapeOnly())
	}
	// Equal values, equal stand-ins: the HSET's payload is the HGET's reply
	// and the HGETALL's value.
	if want := "$13\r\n" + string(hset[3]) + "\r\n"; string(rs[3].Reply) != want {
		t.Errorf("HGET reply %q, want %q", rs[3].Reply, want)
	}
	m, err := resp.Parse(rs[4].Reply)
	if err != nil || m.Type != '%' || len(m.Elems) != 4 || bytes.Contains(rs[4].Reply, []byte("pending")) || string(m.Elems[1].Str) != string(hset[3]) || string(rs[4].Args[1]) != "emq:{q}:job:J9" {
		t.Errorf("HGETALL reply %q (%v), args %q", rs[4].Reply, err, rs[4].Args)
	}
	if v, _ := resp.Parse(rs[5].Reply); v.Type != '=' || !strings.HasPrefix(string(v.Str), "txt:") || len(v.Str) != 15 {
		t.Errorf("verbatim reply %q", rs[5].Reply)
	}
	if v, _ := resp.Parse(rs[6].Reply); v.Type != ',' || len(v.Str) != len("3.14159") || string(rs[6].Args[2]) == "J9" {
		t.Errorf("ZSCORE %q reply %q", rs[6].Args, rs[6].Reply)
	}
	if v, _ := resp.Parse(rs[7].Reply); v.Type != '-' || !strings.HasPrefix(string(v.Str), "WRONGTYPE ") || !rs[7].ShapeOnly() {
		t.Errorf("error reply %q", rs[7].Reply)
	}
	if v, _ := resp.Parse(rs[8].Reply); v.Type != '!' || !strings.HasPrefix(string(v.Str), "SYNTAX ") {
		t.Errorf("blob error reply %q", rs[8].Reply)
	}
}

// Stand-ins are keyed per capture: the same value gets the same stand-in
// within a capture and another in the next one; a reply redaction cannot
// parse is not kept.
func TestStandInsArePerCapture(t *testing.T) {
	a, _ := redacted(t, enqueueRecord(1, "J1", "short"), enqueueRecord(2, "J2", "short"), enqueueRecord(3, "J3", strings.Repeat("long", 40)))
	b, _ := redacted(t, enqueueRecord(1, "J1", "short"))
	if string(a[0].Args[6]) != string(a[1].Args[6]) {
		t.Errorf("equal payloads, different stand-ins within a capture: %q %q", a[0].Args[6], a[1].Args[6])
	}
	if string(a[0].Args[6]) == string(b[0].Args[6]) {
		t.Errorf("the same stand-in %q in two captures", a[0].Args[6])
	}
	if long := a[2].Args[6]; len(long) != 160 || !isHex(long) || strings.Contains(string(long), "long") {
		t.Errorf("long stand-in %q", long)
	}
	bad := &Record{Seq: 1, Queue: "q", Args: args("GET", "emq:{q}:x"), Reply: []byte("?what s3cr3t\r\n")}
	rs, raw := redacted(t, bad)
	if bytes.Contains(raw, []byte("s3cr3t")) || !rs[0].ShapeOnly() || !strings.HasPrefix(string(rs[0].Reply), "-REDACTED ") {
		t.Errorf("unparsed reply kept as %q", rs[0].Reply)
	}
}

// A stand-in is the same whether it is computed or copied from the
// redactor's memo of recent values, and it is written over the value.
func TestStandInMemo(t *testing.T) {
	z := newRedactor()
	for _, v := range []string{"", "x", "secret-stuff!", strings.Repeat("p", 64), strings.Repeat("q", 65), strings.Repeat("r", 1000)} {
		first := []byte(v)
		z.standIn(first)
		again := []byte(v)
		z.standIn(again) // from the memo, for the short ones
		z.memo = new([memoSlots]memoEntry)
		fresh := []byte(v)
		z.standIn(fresh)
		if !bytes.Equal(first, again) || !bytes.Equal(first, fresh) || len(first) != len(v) || !isHex(first) {
			t.Errorf("%d bytes: stand-ins %q, %q, %q", len(v), first, again, fresh)
		}
		if len(v) > 0 && string(first) == v {
			t.Errorf("%q kept", v)
		}
	}
}

// plainReply takes exactly the integer and simple string replies resp.Parse
// takes.
func TestPlainReplyAgreesWithParse(t *testing.T) {
	for _, b := range []string{":1\r\n", ":-5\r\n", ":+5\r\n", ":x\r\n", ":\r\n", "+OK\r\n", "+\r\n", "+a\r\r\n",
		":1\r\n:2\r\n", "+OK\r\n+OK\r\n", ":1", ":1\n", "$1\r\na\r\n", "-ERR x\r\n", ":99999999999999999999\r\n", "*0\r\n"} {
		v, err := resp.Parse([]byte(b))
		want := err == nil && (v.Type == ':' || v.Type == '+')
		if got := plainReply([]byte(b)); got != want {
			t.Errorf("%q: plainReply %v, resp.Parse %v (%v)", b, got, want, err)
		}
	}
}
