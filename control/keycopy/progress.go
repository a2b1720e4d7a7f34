package keycopy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/emqproxy/emqproxy/control/table"
	"github.com/emqproxy/emqproxy/control/tail"
	"github.com/emqproxy/emqproxy/rewrite"
)

// Reporter reports a running move: a line on the terminal and the record
// of its progress on the source, at the interval StartProgress was given.
type Reporter struct {
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

// StartProgress samples the copy of queue every every (default 1s): it
// says a line (say) and stores the progress on src until stop.
func StartProgress(ctx context.Context, src *table.Node, queue string, every time.Duration, say func(string, ...any), cp *Copier, tr *tail.Tracker) *Reporter {
	pr := &Reporter{done: make(chan struct{}), began: time.Now(), lastAt: time.Now()}
	pr.p.Phase = "copying"
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
			say("progress: %s%s", p, pr.reading(cp))
			_ = storeProgress(ctx, src, queue, p)
		}
	}()
	return pr
}

func (pr *Reporter) sample(cp *Copier, tr *tail.Tracker) Progress {
	keys, bytes := cp.St.Snapshot()
	n, _ := tr.Pending()
	_, restarts := tr.Counts()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	now := time.Now()
	dt := now.Sub(pr.lastAt).Seconds()
	if dt > 0 {
		pr.p.Rate = float64(keys-pr.lastK) / dt
		pr.p.ByteRate = float64(bytes-pr.lastB) / dt
	}
	read := cp.St.readBytes()
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
func (pr *Reporter) reading(cp *Copier) string {
	what := cp.working()
	if what == "" {
		return ""
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return fmt.Sprintf("; %s, reading %s/s", what, tail.ByteSize(int64(pr.rRate)))
}

func (pr *Reporter) Round(r int) {
	pr.mu.Lock()
	pr.p.Round, pr.began, pr.frac = r, time.Now(), 0
	pr.mu.Unlock()
}

func (pr *Reporter) Scanned(f float64) {
	pr.mu.Lock()
	pr.frac = f
	pr.mu.Unlock()
}

func (pr *Reporter) Phase(s string) {
	pr.mu.Lock()
	pr.p.Phase = s
	pr.mu.Unlock()
}

func (pr *Reporter) Stop() {
	close(pr.done)
	pr.wg.Wait()
}

// keyProgress is the prefix of a move's progress, beside its record (a
// string with a short expiry, rewritten while the mover runs).
const keyProgress = rewrite.ControlKeyPrefix + ":progress:"

// ProgressKey is the key of the progress of the move of queue.
func ProgressKey(queue string) string { return keyProgress + queue }

// Progress is a running move's progress, stored beside its record.
type Progress struct {
	Phase    string  `json:"phase"` // copying, held
	Round    int     `json:"round"`
	Keys     int64   `json:"keys"`    // keys written so far (a key copied again counts again)
	Bytes    int64   `json:"bytes"`   // bytes written so far
	Rate     float64 `json:"rate"`    // keys per second, lately
	ByteRate float64 `json:"brate"`   // bytes per second, lately
	Scanned  float64 `json:"scanned"` // the part of a full round's scan done (0..1)
	Pending  int     `json:"pending"` // changed keys waiting for the next round
	ETA      int64   `json:"eta_ms"`  // the estimated time left in this round, ms (-1: unknown)
	Restarts int     `json:"restarts"`
	Updated  int64   `json:"updated"` // unix ms
}

// String is the progress as one line.
func (p Progress) String() string {
	eta := "unknown"
	if p.ETA >= 0 {
		eta = (time.Duration(p.ETA) * time.Millisecond).Round(100 * time.Millisecond).String()
	}
	s := fmt.Sprintf("%s, round %d: %d keys (%s) copied, %.0f keys/s (%s/s)", p.Phase, p.Round, p.Keys, tail.ByteSize(p.Bytes), p.Rate, tail.ByteSize(int64(p.ByteRate)))
	if p.Scanned > 0 && p.Scanned < 1 {
		s += fmt.Sprintf(", scanned %.0f%%", 100*p.Scanned)
	}
	s += fmt.Sprintf(", %d changed keys waiting, round time left %s", p.Pending, eta)
	if p.Restarts > 0 {
		s += fmt.Sprintf(", tracking restarted %d times", p.Restarts)
	}
	return s
}

// storeProgress writes p beside the record (expiring a minute after the
// last write: a killed mover's progress does not linger).
func storeProgress(ctx context.Context, n *table.Node, queue string, p Progress) error {
	b, _ := json.Marshal(p)
	return n.C.Do(ctx, n.C.B().Set().Key(ProgressKey(queue)).Value(string(b)).Px(time.Minute).Build()).Error()
}

// ReadProgress reads a move's progress (nil: none).
func ReadProgress(ctx context.Context, n *table.Node, queue string) *Progress {
	s, err := n.C.Do(ctx, n.C.B().Get().Key(ProgressKey(queue)).Build()).ToString()
	if err != nil {
		return nil
	}
	var p Progress
	if json.Unmarshal([]byte(s), &p) != nil {
		return nil
	}
	return &p
}
