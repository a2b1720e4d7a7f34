package rewrite

// kind says which part of the decision rule handles a command.
type kind uint8

const (
	kPlain kind = iota // no special handling: version key check, deny list, pass
	kAuth
	kHello
	kPing
	kEcho
	kQuit
	kReset
	kSelect
	kClient
	kEval
	kEvalSha
	kEvalRO
	kEvalShaRO
	kScript
	kMulti
	kExec
	kDiscard
	kWatch
	kUnwatch
	kSubscribe
	kUnsubscribe
	kBlocking
	kXread
	kEmqVersion
	kGet
	kSet
	kExists
	kType
	kStrlen
	kTTL
	kACL
)

// Flags of a command table entry.
const (
	// fSub: the command has subcommands; the deny list is also checked
	// for "NAME SUB".
	fSub uint8 = 1 << iota
	// fNoKeys: the command names no keys (channels, options, nothing), so
	// the version key check is skipped.
	fNoKeys
	// fDefaultDeny: DefaultDeny lists the command by its name alone (set
	// by init, so the default policy needs no deny-list lookup for
	// the other commands of the table).
	fDefaultDeny
)

// keySpec says where a command's keys are: args[first], args[first+step],
// ... up to args[last], where a negative last counts from the end (-1 is
// the last argument). A zero first means the positions are not known: every
// argument is checked.
type keySpec struct {
	first, last, step int8
}

// cmdInfo is one entry of the command table.
type cmdInfo struct {
	kind  kind
	flags uint8
	keys  keySpec
}

var (
	key1     = keySpec{1, 1, 1}  // one key, the first argument
	keysAll  = keySpec{1, -1, 1} // every argument is a key
	keysPair = keySpec{1, -1, 2} // key value key value ...
	keys12   = keySpec{1, 2, 1}  // source and destination
	keysBlk  = keySpec{1, -2, 1} // keys then a timeout
	keyObj   = keySpec{2, 2, 1}  // OBJECT <sub> key
	noKeys   = cmdInfo{flags: fNoKeys}
	plain1   = cmdInfo{keys: key1}
	plainAll = cmdInfo{keys: keysAll}
)

// maxName is the longest command name in the table; longer names are unknown.
const maxName = 24

// commands is the one command table: upper-case name to its entry.
// Commands not in it get the conservative default: deny list checked with
// and without a subcommand, and every argument checked for the version key.
var commands = map[string]cmdInfo{
	// Connection-local.
	"AUTH":   {kind: kAuth, flags: fNoKeys},
	"HELLO":  {kind: kHello, flags: fNoKeys},
	"PING":   {kind: kPing, flags: fNoKeys},
	"ECHO":   {kind: kEcho, flags: fNoKeys},
	"QUIT":   {kind: kQuit, flags: fNoKeys},
	"RESET":  {kind: kReset, flags: fNoKeys},
	"SELECT": {kind: kSelect, flags: fNoKeys},
	"CLIENT": {kind: kClient, flags: fNoKeys | fSub},
	"ACL":    {kind: kACL, flags: fNoKeys | fSub}, // ACL WHOAMI; the others as a subcommand family

	// Scripts. Their keys are found through numkeys.
	"EVAL":       {kind: kEval, flags: fNoKeys},
	"EVALSHA":    {kind: kEvalSha, flags: fNoKeys},
	"EVAL_RO":    {kind: kEvalRO, flags: fNoKeys},
	"EVALSHA_RO": {kind: kEvalShaRO, flags: fNoKeys},
	"SCRIPT":     {kind: kScript, flags: fNoKeys | fSub},

	// Sessions.
	"MULTI":        {kind: kMulti, flags: fNoKeys},
	"EXEC":         {kind: kExec, flags: fNoKeys},
	"DISCARD":      {kind: kDiscard, flags: fNoKeys},
	"WATCH":        {kind: kWatch, flags: fNoKeys},
	"UNWATCH":      {kind: kUnwatch, flags: fNoKeys},
	"SUBSCRIBE":    {kind: kSubscribe, flags: fNoKeys},
	"PSUBSCRIBE":   {kind: kSubscribe, flags: fNoKeys},
	"SSUBSCRIBE":   {kind: kSubscribe, flags: fNoKeys},
	"BLPOP":        {kind: kBlocking, keys: keysBlk},
	"BRPOP":        {kind: kBlocking, keys: keysBlk},
	"BZPOPMIN":     {kind: kBlocking, keys: keysBlk},
	"BZPOPMAX":     {kind: kBlocking, keys: keysBlk},
	"BLMOVE":       {kind: kBlocking, keys: keys12},
	"BRPOPLPUSH":   {kind: kBlocking, keys: keys12},
	"BLMPOP":       {kind: kBlocking},
	"BZMPOP":       {kind: kBlocking},
	"WAIT":         {kind: kBlocking, flags: fNoKeys},
	"WAITAOF":      {kind: kBlocking, flags: fNoKeys},
	"XREAD":        {kind: kXread},
	"XREADGROUP":   {kind: kXread},
	"EMQ.VERSION":  {kind: kEmqVersion, flags: fNoKeys},
	"UNSUBSCRIBE":  {kind: kUnsubscribe, flags: fNoKeys},
	"PUNSUBSCRIBE": {kind: kUnsubscribe, flags: fNoKeys},
	"SUNSUBSCRIBE": {kind: kUnsubscribe, flags: fNoKeys},
	"PUBLISH":      noKeys,
	"SPUBLISH":     noKeys,

	// Reads of the version key answered for a wire-4 session.
	"GET":    {kind: kGet, keys: key1},
	"SET":    {kind: kSet, keys: key1},
	"EXISTS": {kind: kExists, keys: keysAll},
	"TYPE":   {kind: kType, keys: key1},
	"STRLEN": {kind: kStrlen, keys: key1},
	"TTL":    {kind: kTTL, keys: key1},
	"PTTL":   {kind: kTTL, keys: key1},

	// Subcommand families (deny list checks "NAME SUB").
	"CONFIG":   {flags: fNoKeys | fSub},
	"FUNCTION": {flags: fNoKeys | fSub},
	"MODULE":   {flags: fNoKeys | fSub},
	"DEBUG":    {flags: fSub},
	"OBJECT":   {flags: fSub, keys: keyObj},
	"MEMORY":   {flags: fSub},
	"XINFO":    {flags: fSub},
	"XGROUP":   {flags: fSub},
	"CLUSTER":  {flags: fNoKeys | fSub},
	"COMMAND":  {flags: fNoKeys | fSub},
	"LATENCY":  {flags: fNoKeys | fSub},
	"SLOWLOG":  {flags: fNoKeys | fSub},
	"PUBSUB":   {flags: fNoKeys | fSub},

	// Keyless commands.
	"INFO": noKeys, "DBSIZE": noKeys, "TIME": noKeys, "LASTSAVE": noKeys,
	"RANDOMKEY": noKeys, "SCAN": noKeys, "KEYS": noKeys, "ROLE": noKeys,
	"READONLY": noKeys, "READWRITE": noKeys, "ASKING": noKeys,

	// One key at the first argument.
	"SETNX": plain1, "SETEX": plain1, "PSETEX": plain1, "GETSET": plain1,
	"GETDEL": plain1, "GETEX": plain1, "APPEND": plain1, "SETRANGE": plain1,
	"GETRANGE": plain1, "SUBSTR": plain1, "INCR": plain1, "DECR": plain1,
	"INCRBY": plain1, "DECRBY": plain1, "INCRBYFLOAT": plain1,
	"EXPIRE": plain1, "PEXPIRE": plain1, "EXPIREAT": plain1, "PEXPIREAT": plain1,
	"EXPIRETIME": plain1, "PEXPIRETIME": plain1, "PERSIST": plain1,
	"DUMP": plain1, "RESTORE": plain1, "MOVE": plain1,
	"GETBIT": plain1, "SETBIT": plain1, "BITCOUNT": plain1, "BITPOS": plain1,
	"BITFIELD": plain1, "BITFIELD_RO": plain1,
	"HSET": plain1, "HSETNX": plain1, "HGET": plain1, "HMSET": plain1,
	"HMGET": plain1, "HGETALL": plain1, "HDEL": plain1, "HLEN": plain1,
	"HEXISTS": plain1, "HKEYS": plain1, "HVALS": plain1, "HINCRBY": plain1,
	"HINCRBYFLOAT": plain1, "HSTRLEN": plain1, "HSCAN": plain1, "HRANDFIELD": plain1,
	"LPUSH": plain1, "RPUSH": plain1, "LPUSHX": plain1, "RPUSHX": plain1,
	"LPOP": plain1, "RPOP": plain1, "LRANGE": plain1, "LLEN": plain1,
	"LINDEX": plain1, "LSET": plain1, "LREM": plain1, "LTRIM": plain1,
	"LINSERT": plain1, "LPOS": plain1,
	"SADD": plain1, "SREM": plain1, "SMEMBERS": plain1, "SISMEMBER": plain1,
	"SMISMEMBER": plain1, "SCARD": plain1, "SPOP": plain1, "SRANDMEMBER": plain1,
	"SSCAN": plain1,
	"ZADD":  plain1, "ZREM": plain1, "ZRANGE": plain1, "ZRANGEBYSCORE": plain1,
	"ZREVRANGEBYSCORE": plain1, "ZRANGEBYLEX": plain1, "ZREVRANGE": plain1,
	"ZSCORE": plain1, "ZMSCORE": plain1, "ZCARD": plain1, "ZINCRBY": plain1,
	"ZRANK": plain1, "ZREVRANK": plain1, "ZCOUNT": plain1, "ZLEXCOUNT": plain1,
	"ZPOPMIN": plain1, "ZPOPMAX": plain1, "ZREMRANGEBYSCORE": plain1,
	"ZREMRANGEBYRANK": plain1, "ZREMRANGEBYLEX": plain1, "ZSCAN": plain1,
	"ZRANDMEMBER": plain1,
	"XADD":        plain1, "XLEN": plain1, "XRANGE": plain1, "XREVRANGE": plain1,
	"XDEL": plain1, "XTRIM": plain1, "XACK": plain1, "XPENDING": plain1,
	"XCLAIM": plain1, "XAUTOCLAIM": plain1, "XSETID": plain1,
	"PFADD": plain1, "GEOADD": plain1, "GEOPOS": plain1, "GEODIST": plain1,
	"GEOHASH": plain1, "GEOSEARCH": plain1,

	// Several keys.
	"DEL": plainAll, "UNLINK": plainAll, "TOUCH": plainAll, "MGET": plainAll,
	"SINTER": plainAll, "SUNION": plainAll, "SDIFF": plainAll,
	"SINTERSTORE": plainAll, "SUNIONSTORE": plainAll, "SDIFFSTORE": plainAll,
	"PFCOUNT": plainAll, "PFMERGE": plainAll,
	"MSET": {keys: keysPair}, "MSETNX": {keys: keysPair},
	"RENAME": {keys: keys12}, "RENAMENX": {keys: keys12}, "COPY": {keys: keys12},
	"SMOVE": {keys: keys12}, "LMOVE": {keys: keys12}, "RPOPLPUSH": {keys: keys12},
}

// lookup upper-cases name into buf and finds its table entry. It returns
// the upper-cased name (in buf, or nil when longer than maxName) and
// whether the command is in the table.
func lookup(buf *[maxName]byte, name []byte) ([]byte, cmdInfo, bool) {
	if len(name) > maxName {
		return nil, cmdInfo{}, false
	}
	var h uint32 = fnvOffset
	up := buf[:len(name)]
	for i, c := range name {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up[i] = c
		h = fnvStep(h, c)
	}
	for i := h; ; i++ {
		e := &index[i&(indexSize-1)]
		if e.name == "" {
			return up, cmdInfo{}, false
		}
		if e.name == string(up) {
			return up, e.info, true
		}
	}
}

// index is the command table as an open-addressed hash table on the FNV-1a
// hash of the upper-case name, which lookup computes while it upper-cases:
// every command a client sends is looked up, and Go's map, hashing the name
// a second time, showed up as a few per cent of the proxy's CPU under
// pipelined load. Built once from commands by init; at most half full, so
// a probe ends at an empty slot. init also marks the entries DefaultDeny
// names (fDefaultDeny) before it copies them here.
var index [indexSize]indexEntry

const (
	indexSize = 512
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

// fnvStep adds one byte to an FNV-1a hash; lookup and init must hash alike.
func fnvStep(h uint32, c byte) uint32 { return (h ^ uint32(c)) * fnvPrime }

type indexEntry struct {
	name string
	info cmdInfo
}

func init() {
	for name := range DefaultDeny {
		if c, ok := commands[name]; ok {
			c.flags |= fDefaultDeny
			commands[name] = c
		}
	}
	if 2*len(commands) > indexSize {
		panic("rewrite: the command index is too small for the table")
	}
	for name, info := range commands {
		var h uint32 = fnvOffset
		for i := 0; i < len(name); i++ {
			h = fnvStep(h, name[i])
		}
		for i := h; ; i++ {
			if e := &index[i&(indexSize-1)]; e.name == "" {
				*e = indexEntry{name, info}
				break
			}
		}
	}
}

// upperInto appends the ASCII upper case of s to dst.
func upperInto(dst, s []byte) []byte {
	for _, c := range s {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// EqualFold reports whether b equals the upper-case ASCII word up, ignoring
// the case of b, without a copy (a command name in a frame).
func EqualFold(b []byte, up string) bool {
	if len(b) != len(up) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != up[i] {
			return false
		}
	}
	return true
}
