package rewrite

// Decide returns the decision for one command. args[0] is the command name
// as the client sent it (any case). Decide does not modify args or st.
func Decide(args [][]byte, st *State, p *Policy) Decision {
	// Placeholder until the decision table lands: everything passes.
	return Decision{Action: Pass}
}
