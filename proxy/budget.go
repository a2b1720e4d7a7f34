package proxy

import "github.com/prometheus/client_golang/prometheus"

// registerBudgetMetrics registers the budget's gauges on reg (when not
// nil), and the authentication table's (authlimit.go):
//
//	emqproxy_buffered_bytes             bytes held of the memory budget now
//	emqproxy_buffered_bytes_limit       the budget (limits.buffered_bytes)
//	emqproxy_buffered_waits_total       times a client's input waited for room
func (s *Server) registerBudgetMetrics(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "emqproxy_buffered_bytes", Help: "Bytes held for clients (large commands, replies, transactions, messages) of the memory budget.",
		}, func() float64 { used, _ := s.mem.InUse(); return float64(used) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "emqproxy_buffered_bytes_limit", Help: "The memory budget (limits.buffered_bytes).",
		}, func() float64 { return float64(s.mem.Limit()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "emqproxy_buffered_waits_total", Help: "Times a client's input waited for room in the memory budget.",
		}, func() float64 { _, waits := s.mem.InUse(); return float64(waits) }),
	}
	if err := s.fails.RegisterMetrics(reg); err != nil {
		return err
	}
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
