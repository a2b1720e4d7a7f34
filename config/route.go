package config

import "path"

// matchQueue reports whether queue matches the glob pattern (path.Match
// syntax; a queue name holds no '/', so '*' matches any queue).
func matchQueue(pattern, queue string) (bool, error) {
	return path.Match(pattern, queue)
}

// RouteFor returns the upstream name of the first route whose patterns match
// queue. The last route matches every queue (Validate ensures it).
func (c *Config) RouteFor(queue string) string {
	for _, r := range c.Routes {
		for _, p := range r.Queues {
			if ok, _ := matchQueue(p, queue); ok {
				return r.Upstream
			}
		}
	}
	return ""
}
