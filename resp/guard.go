package resp

import "bytes"

// The client input framer.
//
// It is written here rather than taken from redcon because redcon's server
// loop enforces no protocol limits (`*1\r\n$9223372036854775807\r\n` panics
// it, a huge multibulk count pins a core, a huge declared bulk grows the heap
// without bound), reads 4 KiB at a time, and its parser costs ~470 ns and two
// allocations per command, where framing alone costs ~110 ns and none.
//
// The framer follows redis 7.0's processMultibulkBuffer and
// processInlineBuffer rule for rule, so that the bytes it forwards are framed
// by the upstream exactly as the proxy framed them: a header line ends at the
// first '\r' (the byte after it is skipped unchecked), a bulk's two trailing
// bytes are skipped unchecked, numbers are parsed like string2ll (no sign,
// no leading zeros), `*0` and `*-N` are ignored, and the error texts are the
// server's own. Limits are checked on the header, before anything is
// buffered past them.

// Default input limits.
const (
	// DefaultMaxMultibulk is the default multibulk count limit. Redis 7.0
	// accepts up to INT_MAX; the proxy defaults lower to bound the memory
	// one command's argument table can take.
	DefaultMaxMultibulk = 1024 * 1024
	// DefaultMaxBulk is redis's default proto-max-bulk-len (512 MiB).
	DefaultMaxBulk = 512 * 1024 * 1024
	// DefaultMaxInline is redis's PROTO_INLINE_MAX_SIZE (64 KiB): the longest
	// inline command and the longest header line.
	DefaultMaxInline = 64 * 1024
)

// Limits for the unauthenticated client, as redis 7.0 applies them while
// authentication is required and not yet done.
const (
	unauthMaxMultibulk = 10
	unauthMaxBulk      = 16384
)

// Protocol error replies, byte for byte as redis 7.0 sends them.
var (
	errReplyMultibulk       = []byte("-ERR Protocol error: invalid multibulk length\r\n")
	errReplyBulk            = []byte("-ERR Protocol error: invalid bulk length\r\n")
	errReplyInline          = []byte("-ERR Protocol error: too big inline request\r\n")
	errReplyMbulkCount      = []byte("-ERR Protocol error: too big mbulk count string\r\n")
	errReplyBulkCount       = []byte("-ERR Protocol error: too big bulk count string\r\n")
	errReplyQuotes          = []byte("-ERR Protocol error: unbalanced quotes in request\r\n")
	errReplyUnauthMultibulk = []byte("-ERR Protocol error: unauthenticated multibulk length\r\n")
	errReplyUnauthBulk      = []byte("-ERR Protocol error: unauthenticated bulk length\r\n")
)

// errReplyExpectedDollar is the reply for a multibulk element that is not a bulk.
func errReplyExpectedDollar(got byte) []byte {
	return []byte("-ERR Protocol error: expected '$', got '" + string([]byte{got}) + "'\r\n")
}

// Limits are the client input limits the Framer enforces.
type Limits struct {
	MaxMultibulk int // largest multibulk count
	MaxBulk      int // largest bulk length
	MaxInline    int // longest inline command and header line
	// Unauthenticated applies redis's tighter limits for a client that must
	// still authenticate (10 arguments, 16 KiB per argument).
	Unauthenticated bool
}

// Status is the outcome of framing one command.
type Status uint8

// The outcomes of Framer.Next.
const (
	Framed     Status = iota // a command was framed
	Skipped                  // an empty command (`*0`, `*-1`, empty inline line) was consumed
	Incomplete               // more bytes are needed
	Invalid                  // a protocol error: reply it and close the client
)

// Frame is one framed client command. Its slices stay valid until the
// Framer that made it is Reset (and the buffer it was framed from is not
// reused); a Frame must not be modified.
type Frame struct {
	// Args are the command's arguments. For a multibulk command they are
	// subslices of the input buffer; for an inline command they are owned.
	Args [][]byte
	// Raw is the command's exact bytes (a subslice of the input buffer) for
	// a multibulk command, or its RESP encoding for an inline command.
	Raw []byte
	// argStart[i] is the offset in Raw where argument i's `$` header
	// starts, so a rewrite can copy the tail from any argument onward as
	// sent.
	argStart []int
}

// TailFrom returns the raw bytes from argument i (its header included) to the
// end of the command.
func (f *Frame) TailFrom(i int) []byte {
	if i >= len(f.Args) {
		return nil
	}
	return f.Raw[f.argStart[i]:]
}

// Framer frames client commands out of a buffer under its Limits, which
// the caller may change between commands. Its argument tables are reused
// between batches: a Frame's slices stay valid until Reset.
type Framer struct {
	Limits Limits
	args   [][]byte // arena of argument slices for the current batch
	starts []int    // arena of argument offsets for the current batch
}

// Reset forgets the frames of the previous batch.
func (fr *Framer) Reset() {
	clear(fr.args) // let the previous batch's buffer go
	fr.args = fr.args[:0]
	fr.starts = fr.starts[:0]
}

// Next frames the command at the start of buf. It returns the status, the
// number of bytes consumed (for Framed and Skipped), and for Invalid
// the reply to send before closing. For Incomplete, need is the total
// buffer length known to be required (0 when unknown): the caller may
// grow its buffer to it at once.
func (fr *Framer) Next(buf []byte) (f Frame, status Status, n int, need int, errReply []byte) {
	if len(buf) == 0 {
		return f, Incomplete, 0, 0, nil
	}
	if buf[0] != '*' {
		return fr.nextInline(buf)
	}
	maxMulti, maxBulk := fr.Limits.MaxMultibulk, fr.Limits.MaxBulk
	// Header: *<count>\r?
	nl, count, ok := headerInt(buf)
	if nl < 0 {
		if len(buf) > fr.Limits.MaxInline {
			return f, Invalid, 0, 0, errReplyMbulkCount
		}
		return f, Incomplete, 0, 0, nil
	}
	if nl > len(buf)-2 {
		return f, Incomplete, 0, 0, nil
	}
	if !ok || count > 1<<31-1 || count > int64(maxMulti) {
		return f, Invalid, 0, 0, errReplyMultibulk
	}
	if count > unauthMaxMultibulk && fr.Limits.Unauthenticated {
		return f, Invalid, 0, 0, errReplyUnauthMultibulk
	}
	pos := nl + 2
	if count <= 0 {
		return f, Skipped, pos, 0, nil
	}
	a0 := len(fr.args)
	for i := int64(0); i < count; i++ {
		rest := buf[pos:]
		nl, l, ok := headerInt(rest)
		if nl < 0 {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			if len(rest) > fr.Limits.MaxInline {
				return f, Invalid, 0, 0, errReplyBulkCount
			}
			return f, Incomplete, 0, 0, nil
		}
		if nl > len(rest)-2 {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			return f, Incomplete, 0, 0, nil
		}
		if rest[0] != '$' {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			return f, Invalid, 0, 0, errReplyExpectedDollar(rest[0])
		}
		if !ok || l < 0 || l > int64(maxBulk) {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			return f, Invalid, 0, 0, errReplyBulk
		}
		if l > unauthMaxBulk && fr.Limits.Unauthenticated {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			return f, Invalid, 0, 0, errReplyUnauthBulk
		}
		data := pos + nl + 2
		end := data + int(l) + 2
		if end > len(buf) {
			fr.args, fr.starts = fr.args[:a0], fr.starts[:a0]
			return f, Incomplete, 0, end, nil
		}
		fr.args = append(fr.args, buf[data:data+int(l):data+int(l)])
		fr.starts = append(fr.starts, pos)
		pos = end
	}
	f = Frame{Args: fr.args[a0:len(fr.args):len(fr.args)], Raw: buf[:pos:pos], argStart: fr.starts[a0:len(fr.starts):len(fr.starts)]}
	return f, Framed, pos, 0, nil
}

// headerInt returns the index of the '\r' that ends the header line at
// the start of b ("*<count>" or "$<length>"), -1 when there is none (as
// headerEnd), and the header's integer, ok false when it is not one (as
// ParseInt). Every command has such lines, so the common one, 1 to
// 18 digits without a leading zero and then '\r', is read in one pass; any
// other line takes headerEnd and ParseInt, which carry redis's
// rules, and gets the same answer the one pass would have.
func headerInt(b []byte) (nl int, v int64, ok bool) {
	for i := 1; i < len(b) && i <= 19; i++ {
		c := b[i]
		if '0' <= c && c <= '9' {
			v = v*10 + int64(c-'0')
			continue
		}
		if c == '\r' && i > 1 && (b[1] != '0' || i == 2) {
			return i, v, true
		}
		break
	}
	nl = headerEnd(b)
	if nl < 1 {
		return nl, 0, false // none, or a line with no type byte
	}
	v, ok = ParseInt(b[1:nl])
	return nl, v, ok
}

// headerEnd returns the index of the first '\r' in b, or -1 when there is
// none before the first NUL byte (redis searches with strchr).
func headerEnd(b []byte) int {
	i := bytes.IndexByte(b, '\r')
	if i < 0 {
		return -1
	}
	if bytes.IndexByte(b[:i], 0) >= 0 {
		return -1
	}
	return i
}

// nextInline frames an inline command (a line of space-separated words).
func (fr *Framer) nextInline(buf []byte) (f Frame, status Status, n int, need int, errReply []byte) {
	nl := bytes.IndexByte(buf, '\n')
	if nl >= 0 && bytes.IndexByte(buf[:nl], 0) >= 0 {
		nl = -1 // redis searches with strchr: a NUL hides the newline
	}
	if nl < 0 {
		if len(buf) > fr.Limits.MaxInline {
			return f, Invalid, 0, 0, errReplyInline
		}
		return f, Incomplete, 0, 0, nil
	}
	line := buf[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	words, ok := splitArgs(line)
	if !ok {
		return f, Invalid, 0, 0, errReplyQuotes
	}
	if len(words) == 0 {
		return f, Skipped, nl + 1, 0, nil
	}
	if fr.Limits.Unauthenticated && len(words) > unauthMaxMultibulk {
		return f, Invalid, 0, 0, errReplyUnauthMultibulk
	}
	// Re-encode as RESP so the upstream sees a multibulk command. Inline
	// commands are rare (people typing), so this allocates.
	enc := AppendArray(nil, len(words))
	starts := make([]int, len(words))
	for i, w := range words {
		starts[i] = len(enc)
		enc = AppendBulk(enc, w)
	}
	return Frame{Args: words, Raw: enc, argStart: starts}, Framed, nl + 1, 0, nil
}

// splitArgs splits an inline command line into words with the quoting rules
// of redis's sdssplitargs: double quotes with \n \r \t \b \a \xHH escapes,
// single quotes with \' only, and a closing quote that must be followed by
// a space or the end of the line. ok is false for unbalanced quotes.
func splitArgs(line []byte) (words [][]byte, ok bool) {
	p := 0
	at := func(i int) byte { // the line is a C string: 0 past its end
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		if p >= len(line) {
			return words, true
		}
		var cur []byte
		inq, insq, done := false, false, false
		for !done {
			c := at(p)
			switch {
			case inq:
				switch {
				case c == '\\' && at(p+1) == 'x' && isHex(at(p+2)) && isHex(at(p+3)):
					cur = append(cur, hexVal(at(p+2))<<4|hexVal(at(p+3)))
					p += 3
				case c == '\\' && at(p+1) != 0:
					p++
					e := at(p)
					switch e {
					case 'n':
						e = '\n'
					case 'r':
						e = '\r'
					case 't':
						e = '\t'
					case 'b':
						e = '\b'
					case 'a':
						e = '\a'
					}
					cur = append(cur, e)
				case c == '"':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			case insq:
				switch {
				case c == '\\' && at(p+1) == '\'':
					p++
					cur = append(cur, '\'')
				case c == '\'':
					if n := at(p + 1); n != 0 && !isSpace(n) {
						return nil, false
					}
					done = true
				case c == 0:
					return nil, false
				default:
					cur = append(cur, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					cur = append(cur, c)
				}
			}
			if at(p) != 0 {
				p++
			}
		}
		if cur == nil {
			cur = []byte{}
		}
		words = append(words, cur)
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// OneLine makes s safe to put in a RESP error line: a CR or LF in it
// would end the line early.
func OneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}
