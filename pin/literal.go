package pin

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// scanner reads Elixir source byte by byte, counting lines from 1.
type scanner struct {
	src   []byte
	i     int
	line  int
	attrs []Attr
}

func (s *scanner) eof() bool { return s.i >= len(s.src) }

// at returns the byte k places ahead, or 0 past the end.
func (s *scanner) at(k int) byte {
	if s.i+k < len(s.src) {
		return s.src[s.i+k]
	}
	return 0
}

func (s *scanner) syntaxf(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrSyntax, line, fmt.Sprintf(format, args...))
}

// literal is one string-like literal as read from the source: a string, a
// charlist, or a sigil, each in single-delimiter or heredoc form.
type literal struct {
	line       int    // line of the opening delimiter
	sigil      string // sigil name ("s", "S", "HTML"), "" for no sigil
	charlist   bool   // '...' or '''...''' without a sigil
	heredoc    bool   // """ or '''
	interp     bool   // #{...} is interpolation
	escapes    bool   // backslash escapes are evaluated
	modifiers  string // letters after a sigil's closing delimiter
	interpLine int    // line of the first #{, 0 when there is none
	outdented  int    // first heredoc line indented less than the closing delimiter, 0 if none
	raw        []byte // content before escapes are evaluated; heredoc indentation already stripped
}

// sigilDelims are the delimiters a sigil may open with (besides heredocs).
const sigilDelims = "\"'([{</|"

func closingDelim(open byte) byte {
	switch open {
	case '(':
		return ')'
	case '[':
		return ']'
	case '{':
		return '}'
	case '<':
		return '>'
	}
	return open
}

// sigilAt reports the length of the sigil name at s.i ("~" excluded) when
// s.i starts a sigil: "~" then one lower-case letter, or an upper-case letter
// followed by upper-case letters and digits, then a delimiter.
func (s *scanner) sigilAt() (int, bool) {
	if s.at(0) != '~' {
		return 0, false
	}
	n := 0
	switch c := s.at(1); {
	case c >= 'a' && c <= 'z':
		n = 1
	case c >= 'A' && c <= 'Z':
		n = 1
		for c := s.at(1 + n); (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); c = s.at(1 + n) {
			n++
		}
	default:
		return 0, false
	}
	d := s.at(1 + n)
	if d == 0 || bytes.IndexByte([]byte(sigilDelims), d) < 0 {
		return 0, false
	}
	return n, true
}

// literalAt reports whether a literal starts at s.i.
func (s *scanner) literalAt() bool {
	if c := s.at(0); c == '"' || c == '\'' {
		return true
	}
	_, ok := s.sigilAt()
	return ok
}

// readLiteral reads the literal starting at s.i and leaves s.i after it
// (after a sigil's modifiers). It fails on source Elixir could not tokenize.
func (s *scanner) readLiteral() (*literal, error) {
	lit := &literal{line: s.line, interp: true, escapes: true}
	if n, ok := s.sigilAt(); ok {
		lit.sigil = string(s.src[s.i+1 : s.i+1+n])
		lower := lit.sigil[0] >= 'a' && lit.sigil[0] <= 'z'
		lit.interp, lit.escapes = lower, lower
		s.i += 1 + n
	} else {
		lit.charlist = s.at(0) == '\''
	}
	var err error
	if m := s.at(0); (m == '"' || m == '\'') && s.at(1) == m && s.at(2) == m {
		lit.heredoc = true
		s.i += 3
		err = s.readHeredoc(lit, m)
	} else {
		open := s.at(0)
		s.i++
		lit.raw, err = s.scan(lit, nil, closingDelim(open), false, nil)
	}
	if err != nil {
		return nil, err
	}
	if lit.sigil != "" {
		start := s.i
		for c := s.at(0); (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); c = s.at(0) {
			s.i++
		}
		lit.modifiers = string(s.src[start:s.i])
	}
	return lit, nil
}

// readHeredoc reads a heredoc after its opening marker and strips from
// each line the indentation of the closing marker, as Elixir does.
func (s *scanner) readHeredoc(lit *literal, marker byte) error {
	for c := s.at(0); c == ' ' || c == '\t'; c = s.at(0) {
		s.i++
	}
	switch {
	case s.at(0) == '\n':
		s.i++
	case s.at(0) == '\r' && s.at(1) == '\n':
		s.i += 2
	default:
		return s.syntaxf(lit.line, "heredoc allows only whitespace characters followed by a new line after opening %s", bytes.Repeat([]byte{marker}, 3))
	}
	s.line++
	raw, indent, err := s.extractHeredoc(lit, marker)
	if err != nil {
		return err
	}
	lit.raw, lit.outdented = stripIndent(raw, indent, lit.line)
	return nil
}

// extractHeredoc reads the body up to the closing marker. The body comes
// back with a leading newline (as Elixir prepends one, so that the first
// line is stripped like the others) and the closing marker's indentation.
func (s *scanner) extractHeredoc(lit *literal, marker byte) ([]byte, int, error) {
	buf := []byte{'\n'}
	if indent, ok := s.closeHeredoc(marker); ok {
		return buf, indent, nil
	}
	var indent int
	closed := false
	buf, err := s.scan(lit, buf, marker, true, func() bool {
		indent, closed = s.closeHeredoc(marker)
		return closed
	})
	return buf, indent, err
}

// closeHeredoc checks, at the start of a line, for horizontal space and the
// closing marker; when found it consumes them and returns the indentation.
func (s *scanner) closeHeredoc(marker byte) (int, bool) {
	j := s.i
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t') {
		j++
	}
	if j+3 <= len(s.src) && s.src[j] == marker && s.src[j+1] == marker && s.src[j+2] == marker {
		indent := j - s.i
		s.i = j + 3
		return indent, true
	}
	return 0, false
}

// scan is Elixir's extraction of a literal's content: it keeps escapes as
// written (they are evaluated later), drops the backslash of an escaped
// terminator, and notes interpolation, skipping over the code inside it.
// For a heredoc, closed is asked after every new line.
func (s *scanner) scan(lit *literal, buf []byte, term byte, heredoc bool, closed func() bool) ([]byte, error) {
	for {
		if s.eof() {
			if heredoc {
				return nil, s.syntaxf(lit.line, "missing terminator %s for the heredoc starting at line %d", bytes.Repeat([]byte{term}, 3), lit.line)
			}
			return nil, s.syntaxf(lit.line, "missing terminator %c for the literal starting at line %d", term, lit.line)
		}
		c := s.src[s.i]
		switch {
		case c == '\\' && s.at(1) == '\n':
			buf = append(buf, '\\', '\n')
			s.i += 2
			s.line++
			if heredoc && closed() {
				return buf, nil
			}
		case c == '\\' && s.at(1) == '\r' && s.at(2) == '\n':
			buf = append(buf, '\\', '\r', '\n')
			s.i += 3
			s.line++
			if heredoc && closed() {
				return buf, nil
			}
		case c == '\n':
			buf = append(buf, '\n')
			s.i++
			s.line++
			if heredoc && closed() {
				return buf, nil
			}
		case !heredoc && c == term:
			s.i++
			return buf, nil
		case heredoc && c == '\\' && s.at(1) == term && s.at(2) == term && s.at(3) == term:
			buf = append(buf, term, term, term)
			s.i += 4
		case !heredoc && c == '\\' && s.at(1) == term:
			buf = append(buf, term)
			s.i += 2
		case lit.interp && c == '\\' && s.at(1) == '#' && s.at(2) == '{':
			buf = append(buf, '\\', '#', '{')
			s.i += 3
		case lit.interp && c == '#' && s.at(1) == '{':
			if lit.interpLine == 0 {
				lit.interpLine = s.line
			}
			s.i += 2
			if err := s.code(true); err != nil {
				return nil, err
			}
		case c == '\\':
			// A backslash takes the next character with it, whatever it is.
			buf = append(buf, '\\')
			s.i++
			if !s.eof() {
				r, err := s.char()
				if err != nil {
					return nil, err
				}
				buf = append(buf, r...)
			}
		default:
			r, err := s.char()
			if err != nil {
				return nil, err
			}
			buf = append(buf, r...)
		}
	}
}

// char consumes one UTF-8 character of a literal, refusing invalid UTF-8
// and the bidirectional formatting characters Elixir refuses in strings.
func (s *scanner) char() ([]byte, error) {
	r, n := utf8.DecodeRune(s.src[s.i:])
	if r == utf8.RuneError && n <= 1 {
		return nil, s.syntaxf(s.line, "invalid UTF-8 in a literal")
	}
	if (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) {
		return nil, s.syntaxf(s.line, "bidirectional formatting character U+%04X in a literal; write it as an escape", r)
	}
	b := s.src[s.i : s.i+n]
	s.i += n
	if r == '\n' {
		s.line++
	}
	return b, nil
}

// stripIndent removes up to indent spaces or tabs after every new line of
// raw and drops raw's leading new line. A line with less indentation loses
// what it has (Elixir warns "outdented heredoc line"); its source line is
// returned (0 when none), counted from first, the line of the opening marker.
func stripIndent(raw []byte, indent, first int) ([]byte, int) {
	out := make([]byte, 0, len(raw))
	outdented := 0
	newlines := 0
	for j := 0; j < len(raw); {
		c := raw[j]
		out = append(out, c)
		j++
		if c != '\n' {
			continue
		}
		newlines++
		n := indent
		for n > 0 && j < len(raw) && (raw[j] == ' ' || raw[j] == '\t') {
			j++
			n--
		}
		if n > 0 && j < len(raw) && raw[j] != '\n' && (raw[j] != '\r' || j+1 >= len(raw) || raw[j+1] != '\n') {
			if outdented == 0 {
				outdented = first + newlines
			}
		}
	}
	return out[1:], outdented
}

// value is the string the literal evaluates to, when it is a fixed string.
func (lit *literal) value() ([]byte, error) {
	switch {
	case lit.interpLine != 0:
		return nil, fmt.Errorf("%w: interpolation #{...} on line %d (a body with interpolation has no fixed sha)", ErrNotFixed, lit.interpLine)
	case lit.charlist:
		return nil, fmt.Errorf("%w: a charlist ('...'), not a string", ErrNotFixed)
	case lit.sigil != "" && lit.sigil != "s" && lit.sigil != "S":
		return nil, fmt.Errorf("%w: sigil ~%s (only ~s and ~S are strings)", ErrNotFixed, lit.sigil)
	case lit.modifiers != "":
		return nil, fmt.Errorf("%w: sigil modifiers %q", ErrNotFixed, lit.modifiers)
	}
	if !lit.escapes {
		return lit.raw, nil
	}
	first := lit.line
	if lit.heredoc {
		first++ // the body starts on the line after the opening marker
	}
	return unescape(lit.raw, first)
}

// unescape evaluates the escapes of an Elixir string literal: \0 \a \b \d
// \e \f \n \r \s \t \v, \xHH (one byte), \uHHHH and \u{H...} (a code point
// in UTF-8), a backslash before a new line (removed with it), and any other
// escaped character standing for itself. The \xH and \x{H...} forms, which
// Elixir deprecated and then removed, are refused, as are surrogates and
// code points past U+10FFFF. line is the line of raw's first byte, for
// messages.
func unescape(raw []byte, line int) ([]byte, error) {
	out := make([]byte, 0, len(raw))
	where := line // the line of raw[j], for messages
	for j := 0; j < len(raw); {
		c := raw[j]
		if c != '\\' || j+1 >= len(raw) {
			if c == '\n' {
				where++
			}
			out = append(out, c)
			j++
			continue
		}
		switch e := raw[j+1]; e {
		case '\n':
			where++
			j += 2
			continue
		case '\r':
			if j+2 < len(raw) && raw[j+2] == '\n' {
				where++
				j += 3
				continue
			}
		case 'x':
			if j+3 < len(raw) && isHex(raw[j+2]) && isHex(raw[j+3]) {
				v, _ := strconv.ParseUint(string(raw[j+2:j+4]), 16, 8)
				out = append(out, byte(v))
				j += 4
				continue
			}
			return nil, fmt.Errorf("%w: line %d: invalid hex escape, expected \\xHH where H is a hexadecimal digit", ErrSyntax, where)
		case 'u':
			cp, n, ok := unicodeEscape(raw[j+2:])
			if !ok {
				return nil, fmt.Errorf("%w: line %d: invalid Unicode escape, expected \\uHHHH or \\u{H*} where H is a hexadecimal digit", ErrSyntax, where)
			}
			if !utf8.ValidRune(cp) {
				return nil, fmt.Errorf("%w: line %d: invalid or reserved Unicode code point \\u{%X}", ErrSyntax, where, cp)
			}
			out = utf8.AppendRune(out, cp)
			j += 2 + n
			continue
		}
		out = append(out, escapeByte(raw[j+1]))
		j += 2
	}
	return out, nil
}

// escapeByte is the byte a backslash followed by e stands for.
func escapeByte(e byte) byte {
	switch e {
	case '0':
		return 0
	case 'a':
		return 7
	case 'b':
		return '\b'
	case 'd':
		return 0x7f
	case 'e':
		return 0x1b
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 's':
		return ' '
	case 't':
		return '\t'
	case 'v':
		return '\v'
	}
	return e
}

// unicodeEscape reads HHHH or {H...} (one to six digits) after \u.
func unicodeEscape(b []byte) (rune, int, bool) {
	if len(b) >= 4 && isHex(b[0]) && isHex(b[1]) && isHex(b[2]) && isHex(b[3]) {
		v, _ := strconv.ParseUint(string(b[:4]), 16, 32)
		return rune(v), 4, true
	}
	if len(b) < 3 || b[0] != '{' {
		return 0, 0, false
	}
	end := bytes.IndexByte(b, '}')
	if end < 2 || end > 7 {
		return 0, 0, false
	}
	for _, c := range b[1:end] {
		if !isHex(c) {
			return 0, 0, false
		}
	}
	v, _ := strconv.ParseUint(string(b[1:end]), 16, 32)
	return rune(v), end + 1, true
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
