package config

import (
	"fmt"
	"os"
	"strings"
	"unicode"
)

// MinAdminToken is the shortest admin token accepted, in bytes: a token
// guards the reload and the capture from the network, so it must not be
// guessable.
const MinAdminToken = 16

// validateAdmin checks the admin token's keys (never printing the token).
func (c *Config) validateAdmin(p *problems) {
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		p.bad("admin.token", "set admin.token or admin.token_file, not both")
	}
	if c.Admin.Token != "" {
		if why := badToken(c.Admin.Token); why != "" {
			p.bad("admin.token", "%s", why)
		}
	}
}

// badToken says what is wrong with a token, or "".
func badToken(t string) string {
	if len(t) < MinAdminToken {
		return fmt.Sprintf("is %d bytes, shorter than %d", len(t), MinAdminToken)
	}
	if strings.IndexFunc(t, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "holds a space or a control character, which a bearer token cannot carry"
	}
	return ""
}

// AdminToken returns the admin credential: admin.token, or what
// admin.token_file holds (its trailing newline dropped); "" when neither is
// set. An unreadable, empty or unusable file is an error naming the key.
func (c *Config) AdminToken() (string, error) {
	if c.Admin.TokenFile == "" {
		return c.Admin.Token, nil
	}
	b, err := os.ReadFile(c.Admin.TokenFile)
	if err != nil {
		return "", fmt.Errorf("%w: admin.token_file: %w", ErrInvalid, err)
	}
	t := strings.TrimRight(string(b), "\r\n")
	if why := badToken(t); why != "" {
		return "", fmt.Errorf("%w: admin.token_file: the token in %s %s", ErrInvalid, c.Admin.TokenFile, why)
	}
	return t, nil
}
