// Package controltest holds the test helpers the packages under control/
// share: a source and a target node, commands that must succeed, a
// queue of large keys, and the comparison of keys on the two nodes.
package controltest
