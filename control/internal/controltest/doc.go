// Package controltest holds the test helpers the packages under control/
// share: a source and a target node, commands that must succeed, and a
// queue of large keys.
package controltest
