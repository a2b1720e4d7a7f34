package config

import "path"

// matchQueue reports whether queue matches the glob pattern (path.Match
// syntax; a queue name holds no '/', so '*' matches any queue).
func matchQueue(pattern, queue string) (bool, error) {
	return path.Match(pattern, queue)
}
