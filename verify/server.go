package verify

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// serverInfo is what INFO server tells the harness.
type serverInfo struct {
	RunID       string
	Version     string // "redis 7.0.15" or "valkey 8.0.1"
	CachedClock bool   // the module API has a cached clock (Valkey, Redis 7.2+)
}

// readServerInfo reads run_id and the version from INFO server and decides
// whether the server has a cached module clock: any server that reports
// valkey_version (Valkey forked from 7.2), or redis_version 7.2 or later.
func readServerInfo(ctx context.Context, c valkey.Client) (serverInfo, error) {
	text, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		return serverInfo{}, fmt.Errorf("%w: INFO server: %v", ErrServer, err)
	}
	return parseServerInfo(text)
}

func parseServerInfo(text string) (serverInfo, error) {
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	info := serverInfo{RunID: fields["run_id"]}
	if info.RunID == "" {
		return info, fmt.Errorf("%w: INFO server has no run_id", ErrServer)
	}
	if v := fields["valkey_version"]; v != "" {
		info.Version, info.CachedClock = "valkey "+v, true
		return info, nil
	}
	v := fields["redis_version"]
	info.Version = "redis " + v
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return info, fmt.Errorf("%w: INFO server redis_version %q", ErrServer, v)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return info, fmt.Errorf("%w: INFO server redis_version %q", ErrServer, v)
	}
	info.CachedClock = major > 7 || (major == 7 && minor >= 2)
	return info, nil
}

// brand reads {emq}:version ("" when absent).
func (h *harness) brand(ctx context.Context) (string, error) {
	r, err := h.ex.do(ctx, "GET", versionKey)
	if err != nil {
		return "", err
	}
	switch r.Kind {
	case KindNil:
		return "", nil
	case KindBulk:
		return r.Str, nil
	}
	return "", fmt.Errorf("%w: GET %s replied %s", ErrServer, versionKey, r)
}

// setBrand puts b in place of the brand ("" deletes it).
func (h *harness) setBrand(ctx context.Context, b string) error {
	args := []string{"SET", versionKey, b}
	if b == "" {
		args = []string{"DEL", versionKey}
	}
	r, err := h.ex.do(ctx, args...)
	if err != nil {
		return err
	}
	if r.IsError() {
		return fmt.Errorf("%w: %s %s: %s", ErrServer, args[0], versionKey, r.Str)
	}
	return nil
}

// checkVersion asks EMQ.VERSION and demands the wire and the fourteen tokens.
func (h *harness) checkVersion(ctx context.Context) error {
	r, err := h.ex.do(ctx, "EMQ.VERSION")
	if err != nil {
		return err
	}
	if r.Kind != KindArray || len(r.Elems) != 6 || r.Elems[1].Str != Brand || r.Elems[5].Kind != KindArray || len(r.Elems[5].Elems) != len(verbs) {
		return fmt.Errorf("%w: EMQ.VERSION replied %s", ErrNotScratch, r)
	}
	return nil
}
