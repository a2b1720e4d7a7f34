package leftovers

import "testing"

// TestQueueOfKey: a queue key's hashtag is its queue; anything else (the
// control table's keys, a key with a brace in its queue, no hashtag) is no
// queue's, and the leftovers never count it.
func TestQueueOfKey(t *testing.T) {
	for _, tc := range []struct {
		key, queue string
		ok         bool
	}{
		{"emq:{billing}:job:J1", "billing", true},
		{"emq:{billing}:pending", "billing", true},
		{"emq:{a:b}:pending", "a:b", true},
		{"emq:{billing}:pending~emqproxy-tmp", "billing", true},
		{"{emqproxy}:queues", "", false},
		{"emq:{}:pending", "", false},
		{"emq:{a{b}:pending", "", false},
		{"emq:billing:pending", "", false},
		{"emq:{billing}", "", false},
		{"other:{billing}:pending", "", false},
	} {
		q, ok := QueueOfKey(tc.key)
		if q != tc.queue || ok != tc.ok {
			t.Errorf("QueueOfKey(%q) = %q, %v; want %q, %v", tc.key, q, ok, tc.queue, tc.ok)
		}
	}
}
