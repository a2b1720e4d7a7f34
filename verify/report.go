package verify

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Check is one check made after the cases (AOF, restart).
type Check struct {
	Name   string
	Status Status // Equal: passed; Differing: failed; Skipped: not run
	Detail string
}

func (c Check) notRun(why string) Check {
	c.Status, c.Detail = Skipped, "not run: "+why
	return c
}

func (c Check) String() string {
	s := map[Status]string{Equal: "passed", Differing: "FAILED", Skipped: "skipped"}[c.Status]
	return fmt.Sprintf("%s: %s (%s)", c.Name, s, c.Detail)
}

// Report is the outcome of a run.
type Report struct {
	Server      string // e.g. "redis 7.0.15"
	RunID       string
	CachedClock bool
	Cases       []CaseResult
	AOF         Check
	Restart     Check
}

// TokenSummary is one row of the report's table.
type TokenSummary struct {
	Token     string
	Cases     int
	Equal     int
	Differing int
	Skipped   int
	Declared  int         // of Cases, judged against the contract alone
	First     *CaseResult // the first differing case, if any
}

// LeaseExactMode says how the run judged its lease-exact cases: on a
// server with a cached module clock, script, command and TIME ran in one
// MULTI/EXEC and their scores had to be equal; without one, the scores were
// held to the window of server time around the call, and the cases are
// reported skipped (they ran, but could not make the check they exist for).
func (r Report) LeaseExactMode() string {
	if r.CachedClock {
		return "lease-exact mode: equal scores (script, command and TIME in one MULTI/EXEC share the server's cached clock)"
	}
	return "lease-exact mode: window (" + r.Server + " has no cached module clock, so the lease-exact cases hold scores to the window of server time and are reported skipped)"
}

// Tokens summarises the cases per token, in contract order, reads last.
func (r Report) Tokens() []TokenSummary {
	var order []string
	for _, v := range verbs {
		order = append(order, v.Token)
	}
	order = append(order, readNames...)
	byTok := map[string]*TokenSummary{}
	for i := range r.Cases {
		c := &r.Cases[i]
		s := byTok[c.Token]
		if s == nil {
			s = &TokenSummary{Token: c.Token}
			byTok[c.Token] = s
			if !slices.Contains(order, c.Token) {
				order = append(order, c.Token)
			}
		}
		s.Cases++
		if c.Declared {
			s.Declared++
		}
		switch c.Status {
		case Equal:
			s.Equal++
		case Differing:
			s.Differing++
			if s.First == nil {
				s.First = c
			}
		case Skipped:
			s.Skipped++
		}
	}
	var out []TokenSummary
	for _, t := range order {
		if s := byTok[t]; s != nil {
			out = append(out, *s)
		}
	}
	return out
}

// Differing counts the differing cases and failed checks.
func (r Report) Differing() int {
	n := 0
	for _, c := range r.Cases {
		if c.Status == Differing {
			n++
		}
	}
	if r.AOF.Status == Differing {
		n++
	}
	if r.Restart.Status == Differing {
		n++
	}
	return n
}

// DifferingTokens lists the tokens with at least one differing case.
func (r Report) DifferingTokens() []string {
	var out []string
	for _, s := range r.Tokens() {
		if s.Differing > 0 {
			out = append(out, s.Token)
		}
	}
	return out
}

// OK reports whether nothing differed and no check failed.
func (r Report) OK() bool { return r.Differing() == 0 }

// String prints the table per token, the checks, the skipped cases'
// reasons and, for each differing token, its first difference key by key.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "server %s, run_id %s, cached module clock: %v\n", r.Server, r.RunID, r.CachedClock)
	b.WriteString(r.LeaseExactMode() + "\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "token\tcases\tequal\tdiffering\tskipped\tdeclared\t")
	var total TokenSummary
	for _, s := range r.Tokens() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", s.Token, s.Cases, s.Equal, s.Differing, s.Skipped, s.Declared)
		total.Cases += s.Cases
		total.Equal += s.Equal
		total.Differing += s.Differing
		total.Skipped += s.Skipped
		total.Declared += s.Declared
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t\n", total.Cases, total.Equal, total.Differing, total.Skipped, total.Declared)
	_ = tw.Flush()
	b.WriteString("(declared: judged against the contract, not against a script; equal then means as declared)\n")
	for _, c := range []Check{r.AOF, r.Restart} {
		if c.Name != "" {
			b.WriteString(c.String() + "\n")
		}
	}
	reasons := map[string][]string{}
	for _, c := range r.Cases {
		if c.Status == Skipped {
			reasons[c.Reason] = append(reasons[c.Reason], c.Token+" "+c.Name)
		}
	}
	for _, why := range slicesSortedKeys(reasons) {
		fmt.Fprintf(&b, "%s: %s\n", why, strings.Join(reasons[why], "; "))
	}
	for _, s := range r.Tokens() {
		if s.First == nil {
			continue
		}
		left, right := "script", "native"
		if s.First.Declared {
			left, right = "declared", "native"
		}
		fmt.Fprintf(&b, "first difference in %s, case %q (%s | %s):\n", s.Token, s.First.Name, left, right)
		for _, d := range s.First.Diffs {
			fmt.Fprintf(&b, "  %s\n", d)
		}
	}
	return b.String()
}

func slicesSortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
