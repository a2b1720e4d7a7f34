package main

import "fmt"

// checks32 are issue 32's targets, each against its anchor measured in
// the same run: the proxy's CPU per call against twemproxy's, the job mix
// against the same client on Lua directly, ack_replicas 1 against 0,
// capture on against off, one client's added latency against
// twemproxy's.
func (r *runner) checks32() []check {
	var cs []check
	if len(r.ptTargets) == 4 {
		px, twem := r.ptTargets[1].name, r.ptTargets[3].name
		p, t := r.ptSpend("P1", px), r.ptSpend("P1", twem)
		pu, tu := p.us(p.path), t.us(t.path)
		cs = append(cs, check{"passthrough P1 50 clients: proxy CPU per call ≤ twemproxy's",
			fmt.Sprintf("%.2f µs vs %.2f µs", pu, tu), pu > 0 && tu > 0 && pu <= tu})
		ps, ts := r.ptMedian("P1", px, "SET")+r.ptMedian("P1", px, "GET"), r.ptMedian("P1", twem, "SET")+r.ptMedian("P1", twem, "GET")
		cs = append(cs, check{"passthrough P1 50 clients: throughput ≥ twemproxy's (SET and GET)", ratio(ps, ts), ts > 0 && ps >= ts})
		cs = append(cs, r.floorChecks(px, twem)...)
	}
	for _, c := range []struct {
		p    int
		want float64
	}{{1, 1.0}, {16, 1.2}} {
		a, l := r.mixMedian(c.p, mixProxy), r.mixMedian(c.p, mixLua)
		cs = append(cs, check{fmt.Sprintf("job mix P%d through the proxy ≥ %.1f× Lua directly", c.p, c.want), ratio(a, l), l > 0 && a/l >= c.want})
	}
	if a := r.ack; a.ran {
		for _, p := range []int{1, 16} {
			off, on := a.median(p, ackOff), a.median(p, ackOn)
			cs = append(cs, check{fmt.Sprintf("ack_replicas 1 ≥ 0.9× ack_replicas 0 at P%d", p), ratio(on, off), off > 0 && on/off >= 0.9})
		}
	}
	for _, p := range r.pipelines {
		on, off := r.mixMedian(p, mixCapture), r.mixMedian(p, mixProxy)
		if on == 0 || off == 0 {
			continue
		}
		son, soff := r.mixSpend(p, mixCapture), r.mixSpend(p, mixProxy)
		cost := 1 - on/off
		cs = append(cs, check{fmt.Sprintf("capture costs ≤ 10%% at P%d", p),
			fmt.Sprintf("%.1f%% (proxy CPU %.2f vs %.2f µs/call)", 100*cost, son.us(son.path), soff.us(soff.path)), cost <= 0.10})
	}
	if len(r.ptTargets) != 4 {
		return cs
	}
	if c, ok := r.oneClientCheck(r.ptTargets[1].name, r.ptTargets[3].name); ok {
		cs = append(cs, c)
	} else if len(r.latGets) > 0 {
		direct, twem := r.latGetMedian(1, r.ptTargets[0].name), r.latGetMedian(1, r.ptTargets[3].name)
		px := r.latGetMedian(1, r.ptTargets[1].name).sub(direct)
		tw := twem.sub(direct)
		cs = append(cs, check{"1 client P1 GET: added p50 ≤ twemproxy's + 10 µs",
			fmt.Sprintf("%.0f µs vs %.0f µs", px.p50, tw.p50), px.p50 <= tw.p50+10})
	}
	return cs
}
