package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// formatCLI renders one RESP2 reply, as node.RawDo returns it, the way
// redis-cli shows it on a terminal (its --no-raw form): "OK", (integer) 1,
// (nil), (error) ..., a bulk string quoted with its bytes escaped, an array
// as numbered lines, nested ones indented. Each line ends with "\n".
func formatCLI(raw []byte) (string, error) {
	var b strings.Builder
	rest, err := formatReply(&b, raw, "")
	if err != nil {
		return "", err
	}
	if len(rest) != 0 {
		return "", fmt.Errorf("demo: %d bytes after the reply", len(rest))
	}
	return b.String(), nil
}

// formatReply writes the reply at the head of raw, whose first line the
// caller has already prefixed, with prefix before every further line, and
// returns what follows it.
func formatReply(b *strings.Builder, raw []byte, prefix string) ([]byte, error) {
	i := bytes.Index(raw, []byte("\r\n"))
	if len(raw) == 0 || i < 0 {
		return nil, fmt.Errorf("demo: a reply cut short: %q", raw)
	}
	kind, head, rest := raw[0], string(raw[1:i]), raw[i+2:]
	switch kind {
	case '+':
		b.WriteString(head + "\n")
	case '-':
		b.WriteString("(error) " + head + "\n")
	case ':':
		b.WriteString("(integer) " + head + "\n")
	case '$':
		n, err := strconv.Atoi(head)
		if err != nil {
			return nil, fmt.Errorf("demo: bulk length %q", head)
		}
		if n < 0 {
			b.WriteString("(nil)\n")
			return rest, nil
		}
		if len(rest) < n+2 {
			return nil, fmt.Errorf("demo: a bulk string cut short")
		}
		b.WriteString(quoteCLI(rest[:n]) + "\n")
		return rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(head)
		if err != nil {
			return nil, fmt.Errorf("demo: array length %q", head)
		}
		if n < 0 {
			b.WriteString("(nil)\n")
			return rest, nil
		}
		if n == 0 {
			b.WriteString("(empty array)\n")
			return rest, nil
		}
		width := len(strconv.Itoa(n))
		inner := prefix + strings.Repeat(" ", width+2)
		for k := 1; k <= n; k++ {
			if k > 1 {
				b.WriteString(prefix)
			}
			fmt.Fprintf(b, "%*d) ", width, k)
			if rest, err = formatReply(b, rest, inner); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("demo: reply type %q is not RESP2", kind)
	}
	return rest, nil
}

// quoteCLI quotes s as redis-cli does (sdscatrepr): \\ and \" escaped,
// \n \r \t \a \b by name, other bytes outside printable ASCII as \xhh.
func quoteCLI(s []byte) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch c {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		default:
			if c >= 0x20 && c < 0x7f {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
