package capture

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkRedaction measures what redaction adds to the writer's work on
// a record (an ENQUEUE whose payload is the size named): the record's
// encoding alone is the baseline, timed in the same run, and the ratio of
// redaction plus encoding to it is reported as x-baseline.
func BenchmarkRedaction(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			payload := strings.Repeat("p", size)
			z := newRedactor()
			var buf []byte
			run := func(redact bool) time.Duration {
				start := time.Now()
				for i := range b.N {
					r := enqueueRecord(uint64(i), "J1", payload)
					if redact {
						z.redact(r)
					}
					buf = r.AppendBinary(buf[:0])
				}
				return time.Since(start)
			}
			base := run(false)
			b.ResetTimer()
			red := run(true)
			b.ReportMetric(float64(red)/float64(max(base, 1)), "x-baseline")
		})
	}
}
