package upstream

// Metrics is what an upstream reports; package observe's Metrics
// implements it (metrics.go there). Every method is called with the upstream's name.
type Metrics interface {
	// UpstreamError counts an error of kind (dial, fence, lost, probe,
	// ...: errKind).
	UpstreamError(name, kind string)
	// Reconnect counts a shared connection opened again after it broke.
	Reconnect(name string)
	// UpstreamState reports whether the upstream is up and fenced.
	UpstreamState(name string, up, fenced bool)
	// Follows makes a Sentinel upstream's failover series exist, at 0.
	Follows(name string)
	// Primary reports a Sentinel upstream's primary moving from old to
	// addr.
	Primary(name, old, addr string)
	// Failover counts a switch of a Sentinel upstream's primary.
	Failover(name string)
}

// NopMetrics discards what an upstream reports.
type NopMetrics struct{}

func (NopMetrics) UpstreamError(string, string)     {}
func (NopMetrics) Reconnect(string)                 {}
func (NopMetrics) UpstreamState(string, bool, bool) {}
func (NopMetrics) Follows(string)                   {}
func (NopMetrics) Primary(string, string, string)   {}
func (NopMetrics) Failover(string)                  {}
