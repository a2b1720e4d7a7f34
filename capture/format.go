package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
)

// Magic starts every capture file.
const Magic = "EMQCAP\r\n"

// Version is the format version this package writes and reads.
const Version = 1

// Ext is the file name extension of capture files.
const Ext = ".emqcap"

// frameHead is the length and checksum in front of every frame body.
const frameHead = 8

// maxFrame bounds a frame body the reader accepts (a command of the
// proxy's largest bulk and more would not be captured whole anyway).
const maxFrame = 1 << 30

// kindCall is the kind byte of a call record.
const kindCall = 1

// Record flags.
const (
	FlagRedacted  = 1 << 0 // payload values were replaced by stand-ins
	FlagShapeOnly = 1 << 1 // the reply's contents (bulks, error texts) are stand-ins: compare its shape only
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors of the reader; each is wrapped with the file, the offset and the
// record concerned.
var (
	// ErrForeign: the file does not start with Magic.
	ErrForeign = errors.New("capture: not a capture file")
	// ErrVersion: the file's format version is not Version.
	ErrVersion = errors.New("capture: unknown format version")
	// ErrCorrupt: a frame's checksum, length or body is wrong.
	ErrCorrupt = errors.New("capture: corrupt")
)

// Header is the first frame of every file.
type Header struct {
	Format    int      `json:"format"`     // Version
	MapDigest string   `json:"map_digest"` // the pinned map the proxy used when the file was opened
	Redacted  bool     `json:"redacted"`
	Started   int64    `json:"started_us"` // when the capture started, unix µs
	File      int      `json:"file"`       // the file's number within its capture, from 1
	Queues    []string `json:"queues"`     // the queue globs captured
}

// Record is one forwarded command, its reply and its time.
type Record struct {
	Seq     uint64        // order of the proxy's decisions, over the whole capture
	Time    time.Time     // when the command's batch was framed (µs)
	Latency time.Duration // from Time to the reply (µs)
	Conn    uint64        // the client connection
	Flags   byte
	Queue   string // the queue (hashtag) the command is for
	Script  string // the pinned script's name, for a script call
	Token   string // the job-core token, for a verb call
	Args    [][]byte
	Reply   []byte // RESP, as the upstream sent it

	// payload is where the call and reply carry payload; name, keys and
	// keysSet where a plain command names itself and its keys (none is
	// encoded; set by whoever adds the record, used by redaction).
	payload shamap.Payload
	name    int
	keys    []int
	keysSet bool
}

// SetPayload notes the payload positions of the record's script, for
// redaction.
func (r *Record) SetPayload(p shamap.Payload) { r.payload = p }

// SetKeys notes, for the redaction of a plain command, how many leading
// arguments name it (1, or 2 with a subcommand) and the indices in Args of
// its keys, as the server's command table gives them. Without it, the
// arguments that are keys of the record's queue are taken as its keys.
func (r *Record) SetKeys(name int, keys []int) {
	r.name, r.keys, r.keysSet = name, keys, true
}

// Redacted reports whether the record's payloads are stand-ins.
func (r *Record) Redacted() bool { return r.Flags&FlagRedacted != 0 }

// ShapeOnly reports whether only the reply's shape is meaningful.
func (r *Record) ShapeOnly() bool { return r.Flags&FlagShapeOnly != 0 }

// AppendBinary appends the record's body encoding to b.
func (r *Record) AppendBinary(b []byte) []byte {
	b = append(b, kindCall)
	b = binary.AppendUvarint(b, r.Seq)
	b = binary.AppendVarint(b, r.Time.UnixMicro())
	b = binary.AppendUvarint(b, uint64(max(r.Latency.Microseconds(), 0)))
	b = binary.AppendUvarint(b, r.Conn)
	b = append(b, r.Flags)
	b = appendBytes(b, []byte(r.Queue))
	b = appendBytes(b, []byte(r.Script))
	b = appendBytes(b, []byte(r.Token))
	b = binary.AppendUvarint(b, uint64(len(r.Args)))
	for _, a := range r.Args {
		b = appendBytes(b, a)
	}
	return appendBytes(b, r.Reply)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads a record body; the slices it returns alias the body.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s", what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad " + what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint is uvarint's zig-zag decoding, as binary.Varint does it.
func (d *decoder) varint(what string) int64 {
	ux := d.uvarint(what)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) bytes(what string) []byte {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("bad " + what + " length")
		return nil
	}
	d.b = d.b[k:]
	if n > uint64(len(d.b)) {
		d.fail(what + " longer than the record")
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) byte1(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("no " + what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// decodeRecord parses a record body (the slices alias body).
func decodeRecord(body []byte) (Record, error) {
	d := decoder{b: body}
	var r Record
	if k := d.byte1("kind"); d.err == nil && k != kindCall {
		return r, fmt.Errorf("unknown record kind %d", k)
	}
	r.Seq = d.uvarint("sequence")
	r.Time = time.UnixMicro(d.varint("time"))
	r.Latency = time.Duration(d.uvarint("latency")) * time.Microsecond
	r.Conn = d.uvarint("connection")
	r.Flags = d.byte1("flags")
	r.Queue = string(d.bytes("queue"))
	r.Script = string(d.bytes("script"))
	r.Token = string(d.bytes("token"))
	n := d.uvarint("argument count")
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("argument count larger than the record")
	}
	if d.err == nil {
		r.Args = make([][]byte, 0, n)
		for i := uint64(0); i < n && d.err == nil; i++ {
			r.Args = append(r.Args, d.bytes("argument"))
		}
	}
	r.Reply = d.bytes("reply")
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d bytes after the reply", len(d.b)))
	}
	if d.err == nil && len(r.Args) == 0 {
		d.fail("no arguments")
	}
	return r, d.err
}

// appendFrame appends a frame holding body to b.
func appendFrame(b, body []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, castagnoli))
	return append(b, body...)
}

// putFrameHead writes the length and checksum of body into frame[:frameHead].
func putFrameHead(frame, body []byte) {
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	binary.BigEndian.PutUint32(frame[4:], crc32.Checksum(body, castagnoli))
}

// fileHead is the magic and version every file starts with.
func fileHead() []byte {
	return binary.BigEndian.AppendUint16([]byte(Magic), Version)
}
