package pin

import (
	"fmt"
	"strings"
)

// Attr is one module attribute definition found in Elixir source: a line
// that starts with "@name" and a space.
type Attr struct {
	// Name is the attribute's name, without "@".
	Name string
	// Line is the line of the "@".
	Line int
	// Value is the string the attribute evaluates to; nil when Err is set.
	Value []byte
	// Err says why the attribute has no fixed string value; it wraps
	// ErrNotFixed (interpolation, not a string literal, the expression
	// goes on after the literal) or ErrSyntax (a bad escape).
	Err error
	// Outdented is the first heredoc line indented less than the closing
	// delimiter (Elixir warns "outdented heredoc line"), 0 when none.
	Outdented int
}

// ScanElixir reads Elixir source and returns its module attribute
// definitions in order: every line starting with "@name" followed by a
// space, outside literals and comments. It skips over strings, charlists,
// sigils, heredocs, comments and character literals (?"), so text inside
// them is never taken for an attribute. It fails only when the source
// cannot be read to its end (an unterminated literal, invalid UTF-8 in one).
func ScanElixir(src []byte) ([]Attr, error) {
	s := &scanner{src: src, line: 1}
	if err := s.code(false); err != nil {
		return nil, err
	}
	return s.attrs, nil
}

// code skips Elixir code. Inside an interpolation it stops after the "}"
// that closes it; at the top level it records attribute definitions.
func (s *scanner) code(inInterp bool) error {
	start := s.line
	depth := 0
	lineStart := s.i == 0 // only spaces and tabs since the last new line
	for !s.eof() {
		c := s.src[s.i]
		if c == ' ' || c == '\t' {
			s.i++
			continue
		}
		atStart := lineStart
		lineStart = false
		switch {
		case c == '\n':
			s.i++
			s.line++
			lineStart = true
		case c == '#':
			for !s.eof() && s.src[s.i] != '\n' {
				s.i++
			}
		case s.literalAt():
			if _, err := s.readLiteral(); err != nil {
				return err
			}
		case c == '?':
			s.charLiteral()
		case c == '{':
			depth++
			s.i++
		case c == '}':
			s.i++
			if depth == 0 && inInterp {
				return nil
			}
			if depth > 0 {
				depth--
			}
		case c == '@' && !inInterp && atStart:
			if err := s.attribute(); err != nil {
				return err
			}
		case isIdentChar(c):
			for !s.eof() && isIdentChar(s.src[s.i]) {
				s.i++
			}
			if c := s.at(0); c == '?' || c == '!' {
				s.i++
			}
		default:
			s.i++
		}
	}
	if inInterp {
		return s.syntaxf(start, "missing interpolation terminator }")
	}
	return nil
}

// charLiteral skips ?c or ?\c, a character's code point.
func (s *scanner) charLiteral() {
	s.i++
	if s.at(0) == '\\' {
		s.i++
	}
	if s.eof() {
		return
	}
	if s.src[s.i] == '\n' {
		s.line++
	}
	s.i++
	for !s.eof() && s.src[s.i]&0xC0 == 0x80 { // rest of a UTF-8 sequence
		s.i++
	}
}

// attribute reads "@name value" at the start of a line. A name followed by
// anything but a space (a read such as "@name," or "@name(") is skipped.
func (s *scanner) attribute() error {
	line := s.line
	j := s.i + 1
	if j >= len(s.src) || !isIdentStart(s.src[j]) {
		s.i++
		return nil
	}
	for j < len(s.src) && isIdentChar(s.src[j]) {
		j++
	}
	name := string(s.src[s.i+1 : j])
	s.i = j
	k := j
	for k < len(s.src) && (s.src[k] == ' ' || s.src[k] == '\t') {
		k++
	}
	if k == j || k == len(s.src) || s.src[k] == '\n' || s.src[k] == '\r' || s.src[k] == '#' {
		return nil
	}
	s.i = k
	a := Attr{Name: name, Line: line}
	if !s.literalAt() {
		a.Err = fmt.Errorf("%w: @%s is not set to a string literal", ErrNotFixed, name)
		s.attrs = append(s.attrs, a)
		return nil
	}
	lit, err := s.readLiteral()
	if err != nil {
		return err
	}
	a.Outdented = lit.outdented
	if a.Value, a.Err = lit.value(); a.Err == nil {
		if a.Err = s.checkTail(); a.Err != nil {
			a.Value = nil
		}
	}
	s.attrs = append(s.attrs, a)
	return nil
}

// continuing are the words that, starting a line, continue the expression
// of the line before as a binary operator.
var continuing = map[string]bool{"and": true, "or": true, "in": true, "when": true}

// operatorStarts are the characters a binary operator (or a list or call
// continuation) may start with.
const operatorStarts = "|&<>+-*/=.^!~\\:;,"

// checkTail makes sure the attribute's expression ends with its literal:
// nothing but a comment after it on its line, and no binary operator (such
// as "|> String.trim()") starting the next line of code.
func (s *scanner) checkTail() error {
	j := s.i
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t') {
		j++
	}
	if j < len(s.src) && s.src[j] == '#' {
		for j < len(s.src) && s.src[j] != '\n' {
			j++
		}
	}
	if j < len(s.src) && s.src[j] != '\n' && !(s.src[j] == '\r' && j+1 < len(s.src) && s.src[j+1] == '\n') {
		return fmt.Errorf("%w: the expression goes on after the literal on line %d", ErrNotFixed, s.line)
	}
	line := s.line
	for j < len(s.src) {
		switch c := s.src[j]; {
		case c == '\n':
			line++
			j++
		case c == ' ' || c == '\t' || c == '\r':
			j++
		case c == '#':
			for j < len(s.src) && s.src[j] != '\n' {
				j++
			}
		case c == '@' || isIdentChar(c):
			k := j
			for k < len(s.src) && isIdentChar(s.src[k]) {
				k++
			}
			if continuing[string(s.src[j:k])] {
				return fmt.Errorf("%w: the expression goes on with %q on line %d", ErrNotFixed, s.src[j:k], line)
			}
			return nil
		case c == ':' && j+1 < len(s.src) && (isIdentStart(s.src[j+1]) || s.src[j+1] == '"'):
			return nil // an atom starts a new expression
		case strings.IndexByte(operatorStarts, c) >= 0:
			return fmt.Errorf("%w: the expression goes on with %q on line %d", ErrNotFixed, c, line)
		default:
			return nil
		}
	}
	return nil
}
