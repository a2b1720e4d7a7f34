package verify

import "fmt"

// valKind is what one value position of a call holds.
type valKind int

const (
	valID    valKind = iota // a job id
	valText                 // free bytes (payload, error text)
	valInt                  // a decimal integer in [0, 2^53)
	valLimit                // a decimal integer in [1, 2^53)
)

// verbSpec is one row of the job-core table: the roles of the keys in
// order and the kinds of the values.
type verbSpec struct {
	Token string
	Keys  []string // roles; roleJob is the row key P job:<id>
	Vals  []valKind
}

// roleJob marks the row key position; rowRoleText is how the error texts
// spell that role.
const (
	roleJob     = "job"
	rowRoleText = "job:<id>"
)

// Brand is the value of {emq}:version a module node carries.
const Brand = "echomq:6.0.0"

// versionKey holds a node's brand.
const versionKey = "{emq}:version"

// verbs is the job-core contract, in the order of its table.
var verbs = []verbSpec{
	{"ENQUEUE", []string{roleJob, "pending"}, []valKind{valID, valText}},
	{"CLAIM", []string{"pending", "active"}, []valKind{valInt}},
	{"EXTEND", []string{"active", roleJob}, []valKind{valID, valInt}},
	{"COMPLETE", []string{"active", roleJob, "done"}, []valKind{valID}},
	{"FAIL", []string{"active", roleJob, "delayed", "dead"}, []valKind{valID, valText, valInt, valInt}},
	{"RETRY", []string{"dead", roleJob, "pending"}, []valKind{valID}},
	{"CANCEL", []string{"pending", "delayed", roleJob}, []valKind{valID}},
	{"PROMOTE", []string{"delayed", "pending"}, []valKind{valLimit}},
	{"REAP", []string{"active", "pending", "dead"}, []valKind{valLimit, valInt}},
	{"PAUSE", []string{"paused"}, nil},
	{"RESUME", []string{"paused"}, nil},
	{"REMOVE", []string{roleJob, "pending", "delayed", "active", "done", "dead"}, []valKind{valID}},
	{"RESCHEDULE", []string{roleJob, "pending", "delayed"}, []valKind{valID, valInt}},
	{"REQUEUE", []string{"active", roleJob, "pending"}, []valKind{valID}},
}

// nativeOnly are the verbs with no scripted twin.
var nativeOnly = map[string]bool{"RESCHEDULE": true, "REQUEUE": true}

// readNames are the declared read scripts the harness runs on both sides.
var readNames = []string{"stats", "peek"}

// readRoles are the key roles of the read scripts.
var readRoles = map[string][]string{
	"stats": {"pending", "delayed", "active", "done", "dead", "paused"},
	"peek":  {roleJob},
}

func verbByToken(tok string) verbSpec {
	for _, v := range verbs {
		if v.Token == tok {
			return v
		}
	}
	panic("verify: unknown token " + tok)
}

// keys returns the call's keys for queue templates: role r becomes "@r",
// the row key "@job:<id>".
func (v verbSpec) keys(id string) []string {
	out := make([]string, len(v.Keys))
	for i, r := range v.Keys {
		if r == roleJob {
			out[i] = "@job:" + id
		} else {
			out[i] = "@" + r
		}
	}
	return out
}

// roleText is how the layout error names the role of key position i (0-based).
func (v verbSpec) roleText(i int) string {
	if v.Keys[i] == roleJob {
		return rowRoleText
	}
	return v.Keys[i]
}

// jobPos is the 1-based position of the row key, 0 when the verb has none.
func (v verbSpec) jobPos() int {
	for i, r := range v.Keys {
		if r == roleJob {
			return i + 1
		}
	}
	return 0
}

// The error texts of the contract.
func errKeys(tok string, want, got int) string {
	return fmt.Sprintf("EMQWIRE EMQ.%s wants %d keys, got %d", tok, want, got)
}

func errVals(tok string, want, got int) string {
	return fmt.Sprintf("EMQWIRE EMQ.%s wants %d values, got %d", tok, want, got)
}

func errInt(tok string, j int) string {
	return fmt.Sprintf("EMQWIRE EMQ.%s value %d must be an integer", tok, j)
}

func errKeyRole(tok string, i int, role string) string {
	return fmt.Sprintf("EMQWIRE EMQ.%s key %d must be %s", tok, i, role)
}

func errFence(found string) string {
	return "EMQWIRE expected " + Brand + " found " + found
}
