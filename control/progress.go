package control

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// progress reports a running move: a line on the terminal and the record
// of its progress on the source, every ProgressEvery.
type progress struct {
	m      *Mover
	mu     sync.Mutex
	p      Progress
	done   chan struct{}
	wg     sync.WaitGroup
	began  time.Time // of the current round
	frac   float64
	lastK  int64
	lastB  int64
	lastAt time.Time
	lastR  int64 // bytes read by comparisons and verifications at lastAt
	rRate  float64
}

func (m *Mover) startProgress(ctx context.Context, src *Node, cp *copier, tr *tracker) *progress {
	pr := &progress{m: m, done: make(chan struct{}), began: time.Now(), lastAt: time.Now()}
	pr.p.Phase = "copying"
	every := m.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-pr.done:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			p := pr.sample(cp, tr)
			m.say("progress: %s%s", p, pr.reading(cp))
			_ = storeProgress(ctx, src, m.Queue, p)
		}
	}()
	return pr
}

func (pr *progress) sample(cp *copier, tr *tracker) Progress {
	keys, bytes := cp.st.snapshot()
	n, _ := tr.pending()
	_, restarts := tr.counts()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	now := time.Now()
	dt := now.Sub(pr.lastAt).Seconds()
	if dt > 0 {
		pr.p.Rate = float64(keys-pr.lastK) / dt
		pr.p.ByteRate = float64(bytes-pr.lastB) / dt
	}
	read := cp.st.readBytes()
	if dt > 0 {
		pr.rRate = float64(read-pr.lastR) / dt
	}
	pr.lastK, pr.lastB, pr.lastR, pr.lastAt = keys, bytes, read, now
	pr.p.Keys, pr.p.Bytes, pr.p.Pending, pr.p.Restarts = keys, bytes, n, restarts
	pr.p.Scanned = pr.frac
	pr.p.ETA = -1
	if el := now.Sub(pr.began); pr.frac > 0.01 && pr.frac < 1 {
		pr.p.ETA = int64(float64(el.Milliseconds()) * (1 - pr.frac) / pr.frac)
	} else if pr.frac == 0 && pr.p.Rate > 0 {
		pr.p.ETA = int64(float64(n) / pr.p.Rate * 1000)
	}
	pr.p.Updated = now.UnixMilli()
	return pr.p
}

// reading is the progress line's end while a large key is copied,
// compared or verified: which, and how fast the source is read for it (a
// comparison or a verification writes nothing, so the keys and bytes
// copied stand still meanwhile).
func (pr *progress) reading(cp *copier) string {
	what := cp.working()
	if what == "" {
		return ""
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return fmt.Sprintf("; %s, reading %s/s", what, byteSize(int64(pr.rRate)))
}

func (pr *progress) round(r int) {
	pr.mu.Lock()
	pr.p.Round, pr.began, pr.frac = r, time.Now(), 0
	pr.mu.Unlock()
}

func (pr *progress) scanned(f float64) {
	pr.mu.Lock()
	pr.frac = f
	pr.mu.Unlock()
}

func (pr *progress) phase(s string) {
	pr.mu.Lock()
	pr.p.Phase = s
	pr.mu.Unlock()
}

func (pr *progress) stop() {
	close(pr.done)
	pr.wg.Wait()
}
