package resp

import (
	"bytes"
	"fmt"
	"strconv"
)

// The parser of a complete reply held in memory, for the readers off the
// data path (the capture's redaction and replay, the fence and boot
// replies of a new upstream connection): Reader frames the bytes, Parse
// tells what they say.

// Value is one RESP2 or RESP3 reply, parsed: Type is its first byte.
//
//	'+' simple string, '-' error, ':' integer, '$' bulk string, '*' array
//	'_' null, '#' boolean, ',' double, '(' big number (Str holds the line)
//	'=' verbatim string (Str holds "txt:..."), '!' blob error
//	'%' map (Elems: key, value, key, value, ...), '~' set, '>' push
//	'|' attribute (Elems: key, value, ..., then the reply it annotates)
//
// Nil marks $-1, *-1 and _.
type Value struct {
	Type  byte
	Nil   bool
	Str   []byte // simple, error (without the type byte), bulk or line content: a subslice of the parsed bytes
	Int   int64
	Elems []Value
}

// maxDepth bounds the nesting of aggregates the parser follows.
const maxDepth = 64

// Parse parses one whole RESP2 or RESP3 reply; trailing bytes are an
// error. The Strs of the Value are subslices of b, so a caller may change
// a reply's contents in place through them (the capture's redaction
// does). Every error wraps ErrProtocol.
func Parse(b []byte) (Value, error) {
	v, n, err := ParsePrefix(b)
	if err != nil {
		return v, err
	}
	if n != len(b) {
		return v, fmt.Errorf("%w: %d bytes after the reply", ErrProtocol, len(b)-n)
	}
	return v, nil
}

// ParsePrefix parses the one reply at the start of b and returns it and
// the number of bytes it takes. Numbers are read as the server writes them
// (ParseInt), a bulk must end in CRLF, and aggregates nest at most 64
// deep.
func ParsePrefix(b []byte) (Value, int, error) {
	return parseValue(b, 0)
}

// parseLine returns the content of the line at the start of b (after its
// type byte, up to the first CRLF) and the length of the line.
func parseLine(b []byte) ([]byte, int, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return nil, 0, fmt.Errorf("%w: truncated reply", ErrProtocol)
	}
	return b[1:i], i + 2, nil
}

func parseValue(b []byte, depth int) (Value, int, error) {
	if len(b) == 0 {
		return Value{}, 0, fmt.Errorf("%w: truncated reply", ErrProtocol)
	}
	if depth > maxDepth {
		return Value{}, 0, fmt.Errorf("%w: aggregates nested deeper than %d", ErrProtocol, maxDepth)
	}
	v := Value{Type: b[0]}
	line, n, err := parseLine(b)
	if err != nil {
		return v, 0, err
	}
	switch v.Type {
	case '+', '-', ',', '(':
		v.Str = line
		return v, n, nil
	case '#':
		if len(line) != 1 || (line[0] != 't' && line[0] != 'f') {
			return v, 0, fmt.Errorf("%w: bad boolean %q", ErrProtocol, line)
		}
		v.Str = line
		return v, n, nil
	case '_':
		if len(line) != 0 {
			return v, 0, fmt.Errorf("%w: bad null %q", ErrProtocol, line)
		}
		v.Nil = true
		return v, n, nil
	case ':':
		i, ok := ParseInt(line)
		if !ok {
			return v, 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, line)
		}
		v.Int = i
		return v, n, nil
	case '$', '=', '!':
		l, ok := ParseInt(line)
		if !ok || l < -1 || (l == -1 && v.Type != '$') || l > int64(len(b)) {
			return v, 0, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line)
		}
		if l == -1 {
			v.Nil = true
			return v, n, nil
		}
		end := n + int(l)
		if len(b) < end+2 || b[end] != '\r' || b[end+1] != '\n' {
			return v, 0, fmt.Errorf("%w: a bulk of %d bytes not followed by CRLF", ErrProtocol, l)
		}
		v.Str = b[n:end]
		return v, end + 2, nil
	case '*', '%', '~', '>', '|':
		c, ok := ParseInt(line)
		if !ok || c < -1 || c > int64(len(b)) || (c == -1 && v.Type != '*') {
			return v, 0, fmt.Errorf("%w: bad aggregate length %q", ErrProtocol, line)
		}
		if c == -1 {
			v.Nil = true
			return v, n, nil
		}
		switch v.Type {
		case '%':
			c *= 2
		case '|':
			c = 2*c + 1 // the attribute's pairs, then the reply it annotates
		}
		if c > int64(len(b)) {
			return v, 0, fmt.Errorf("%w: bad aggregate length %q", ErrProtocol, line)
		}
		v.Elems = make([]Value, 0, c)
		for range c {
			e, m, err := parseValue(b[n:], depth+1)
			if err != nil {
				return v, 0, err
			}
			v.Elems = append(v.Elems, e)
			n += m
		}
		return v, n, nil
	}
	return v, 0, fmt.Errorf("%w: unexpected reply type %q", ErrProtocol, v.Type)
}

// AppendRESP appends v's encoding (in its own protocol's form) to b.
func (v Value) AppendRESP(b []byte) []byte {
	b = append(b, v.Type)
	switch {
	case v.Type == '_':
		return append(b, "\r\n"...)
	case v.Nil:
		return append(b, "-1\r\n"...)
	case v.Type == ':':
		b = strconv.AppendInt(b, v.Int, 10)
		return append(b, "\r\n"...)
	case v.Type == '$' || v.Type == '=' || v.Type == '!':
		b = strconv.AppendInt(b, int64(len(v.Str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.Str...)
		return append(b, "\r\n"...)
	case isAggregate(v.Type):
		n := len(v.Elems)
		switch v.Type {
		case '%':
			n /= 2
		case '|':
			n = (n - 1) / 2
		}
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.Elems {
			b = e.AppendRESP(b)
		}
		return b
	}
	b = append(b, v.Str...)
	return append(b, "\r\n"...)
}

func isAggregate(t byte) bool {
	return t == '*' || t == '%' || t == '~' || t == '>' || t == '|'
}
