package legacy

import (
	"fmt"
	"strconv"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/scripts"
)

// Script names, as the files under stand/scripts and the pinned map name them.
const (
	ScriptEnqueue  = "enqueue"
	ScriptClaim    = "claim2"
	ScriptExtend   = "extend"
	ScriptComplete = "complete"
	ScriptFail     = "fail"
	ScriptRetry    = "retry"
	ScriptCancel   = "cancel"
	ScriptPromote  = "promote"
	ScriptReap     = "reap"
	ScriptPause    = "pause"
	ScriptResume   = "resume"
	ScriptRemove   = "remove"
	ScriptStats    = "stats"
	ScriptPeek     = "peek"
)

// ScriptNames lists every script the client sends, verbs first, then the reads.
var ScriptNames = []string{
	ScriptEnqueue, ScriptClaim, ScriptExtend, ScriptComplete, ScriptFail,
	ScriptRetry, ScriptCancel, ScriptPromote, ScriptReap, ScriptPause,
	ScriptResume, ScriptRemove, ScriptStats, ScriptPeek,
}

// script is one script the client can send.
type script struct {
	name string
	sha  string
	body []byte
	read bool // sent with EVALSHA_RO
}

// loadScripts reads every body, computes its sha and, when a map is given,
// checks the sha against its pin.
func loadScripts(o Options) (map[string]*script, error) {
	bodies := o.Bodies
	if bodies == nil {
		bodies = scripts.Body
	}
	out := make(map[string]*script, len(ScriptNames))
	for _, name := range ScriptNames {
		body := bodies(name)
		if len(body) == 0 {
			return nil, fmt.Errorf("%w: no body for %q", ErrScript, name)
		}
		s := &script{name: name, sha: shamap.SHA(body), body: body,
			read: name == ScriptStats || name == ScriptPeek}
		if o.Map != nil {
			pin, ok := o.Map.ByName(name)
			switch {
			case !ok:
				return nil, fmt.Errorf("%w: %q is not pinned in %s", ErrScript, name, o.Map.Path)
			case pin.SHA != s.sha:
				return nil, fmt.Errorf("%w: %q body has sha %s, pinned %s", ErrScript, name, s.sha, pin.SHA)
			}
			s.read = pin.Read
		}
		out[name] = s
	}
	return out, nil
}

// SHA returns the sha the client sends for a script ("" for an unknown name).
func (c *Client) SHA(name string) string {
	if s, ok := c.scripts[name]; ok {
		return s.sha
	}
	return ""
}

// line is the command the client sends for a script call: the command, the
// sha, numkeys, the keys, the values.
func (s *script) line(keys, vals []string) []string {
	cmd := "EVALSHA"
	if s.read {
		cmd = "EVALSHA_RO"
	}
	out := make([]string, 0, 3+len(keys)+len(vals))
	out = append(out, cmd, s.sha, strconv.Itoa(len(keys)))
	out = append(out, keys...)
	return append(out, vals...)
}

// Key returns the key of a queue's role: emq:{q}:<role>.
func Key(q, role string) string { return "emq:{" + q + "}:" + role }

// JobKey returns the row key of a job: emq:{q}:job:<id>.
func JobKey(q, id string) string { return "emq:{" + q + "}:job:" + id }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
