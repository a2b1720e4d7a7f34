package capture

import (
	"bytes"
	"errors"
	"strconv"
)

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
	Str   []byte // simple, error (without the type byte), bulk or line content
	Int   int64
	Elems []Value
}

// errRESP is a reply that is not well-formed RESP.
var errRESP = errors.New("not a RESP reply")

// maxDepth bounds the nesting of aggregates the parser follows.
const maxDepth = 64

// ParseReply parses one whole RESP2 or RESP3 reply; trailing bytes are an
// error.
func ParseReply(b []byte) (Value, error) {
	v, n, err := parseValue(b, 0)
	if err != nil {
		return v, err
	}
	if n != len(b) {
		return v, errRESP
	}
	return v, nil
}

func parseLine(b []byte) ([]byte, int, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return nil, 0, errRESP
	}
	return b[1:i], i + 2, nil
}

func parseValue(b []byte, depth int) (Value, int, error) {
	if len(b) == 0 || depth > maxDepth {
		return Value{}, 0, errRESP
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
			return v, 0, errRESP
		}
		v.Str = line
		return v, n, nil
	case '_':
		if len(line) != 0 {
			return v, 0, errRESP
		}
		v.Nil = true
		return v, n, nil
	case ':':
		v.Int, err = strconv.ParseInt(string(line), 10, 64)
		return v, n, err
	case '$', '=', '!':
		l, err := strconv.Atoi(string(line))
		if err != nil || l < -1 || (l == -1 && v.Type != '$') {
			return v, 0, errRESP
		}
		if l == -1 {
			v.Nil = true
			return v, n, nil
		}
		if len(b) < n+l+2 || b[n+l] != '\r' || b[n+l+1] != '\n' {
			return v, 0, errRESP
		}
		v.Str = b[n : n+l]
		return v, n + l + 2, nil
	case '*', '%', '~', '>', '|':
		c, err := strconv.Atoi(string(line))
		if err != nil || c < -1 || c > len(b) || (c == -1 && v.Type != '*') {
			return v, 0, errRESP
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
		if c > len(b) {
			return v, 0, errRESP
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
	return v, 0, errRESP
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
