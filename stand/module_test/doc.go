// Package moduletest holds the tests of the stand's native EchoMQ module
// (stand/module: emq.c with its own minimal API header emq.h), run inside
// real redis-server processes started by package stand/node.
//
// The tests cover what the module must refuse (bad numkeys, wrong counts,
// bad values, row keys, layout, the brand fence, ACL), what each verb
// writes and replies byte for byte, the key specs, the AOF content, and
// that random input never takes the server down.
//
// The package has no API and must not be imported. The module's order of
// checks and its error texts are listed at the top of stand/module/emq.c.
package moduletest
