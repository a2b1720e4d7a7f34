package moduletest

import "strconv"

// shape is one verb's key roles and sample values, as job-core.md gives
// them. The role "job" stands for the row key job:<id>; the value "<id>"
// is the job id.
type shape struct {
	token  string
	roles  []string
	values []string
	ints   []int // 1-based positions of integer values (limit included)
}

// shapes are the fourteen verbs in the order of the job-core contract.
var shapes = []shape{
	{"ENQUEUE", []string{"job", "pending"}, []string{"<id>", "payload"}, nil},
	{"CLAIM", []string{"pending", "active"}, []string{"30000"}, []int{1}},
	{"EXTEND", []string{"active", "job"}, []string{"<id>", "30000"}, []int{2}},
	{"COMPLETE", []string{"active", "job", "done"}, []string{"<id>"}, nil},
	{"FAIL", []string{"active", "job", "delayed", "dead"}, []string{"<id>", "boom", "3", "1000"}, []int{3, 4}},
	{"RETRY", []string{"dead", "job", "pending"}, []string{"<id>"}, nil},
	{"CANCEL", []string{"pending", "delayed", "job"}, []string{"<id>"}, nil},
	{"PROMOTE", []string{"delayed", "pending"}, []string{"10"}, []int{1}},
	{"REAP", []string{"active", "pending", "dead"}, []string{"10", "3"}, []int{1, 2}},
	{"PAUSE", []string{"paused"}, nil, nil},
	{"RESUME", []string{"paused"}, nil, nil},
	{"REMOVE", []string{"job", "pending", "delayed", "active", "done", "dead"}, []string{"<id>"}, nil},
	{"RESCHEDULE", []string{"job", "pending", "delayed"}, []string{"<id>", "1000"}, []int{2}},
	{"REQUEUE", []string{"active", "job", "pending"}, []string{"<id>"}, nil},
}

// keys returns the verb's keys for queue q and job id.
func (s shape) keys(q, id string) []string {
	out := make([]string, len(s.roles))
	for i, r := range s.roles {
		if r == "job" {
			out[i] = row(q, id)
		} else {
			out[i] = key(q, r)
		}
	}
	return out
}

// vals returns the verb's sample values for job id.
func (s shape) vals(id string) []string {
	out := make([]string, len(s.values))
	for i, v := range s.values {
		if v == "<id>" {
			v = id
		}
		out[i] = v
	}
	return out
}

// rowPos is the 1-based position of the row key, 0 when none.
func (s shape) rowPos() int {
	for i, r := range s.roles {
		if r == "job" {
			return i + 1
		}
	}
	return 0
}

// call builds EMQ.<TOKEN> numkeys keys... values...
func call(token string, keys, vals []string) []string {
	out := []string{"EMQ." + token, strconv.Itoa(len(keys))}
	out = append(out, keys...)
	return append(out, vals...)
}

// valid is a well-formed call of the verb on queue q for job id.
func (s shape) valid(q, id string) []string { return call(s.token, s.keys(q, id), s.vals(id)) }
