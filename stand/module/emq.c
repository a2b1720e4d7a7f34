/*
 * emq.c: the stand's native EchoMQ module ("emq").
 *
 * Commands: EMQ.VERSION, EMQ.INSTALL 1 {emq}:version, and the fourteen
 * job-core write verbs of job-core.md, each called with the EVAL shape
 * EMQ.<TOKEN> numkeys key... value...
 *
 * Order of checks in every job-core verb (the first failing check replies,
 * and nothing has been read from or written to the keyspace before the
 * fence, nor written before the domain step):
 *   0. numkeys, as EVALSHA does it (same texts as the server's EVALSHA):
 *        not an integer          ERR value is not an integer or out of range
 *        larger than the args    ERR Number of keys can't be greater than number of args
 *        negative                ERR Number of keys can't be negative
 *      (a call with no numkeys at all is refused by the server's arity
 *      check: ERR wrong number of arguments for 'emq.<token>' command)
 *   1. shape: count of keys, then count of values
 *        EMQWIRE EMQ.<TOKEN> wants <k> keys, got <n>
 *        EMQWIRE EMQ.<TOKEN> wants <v> values, got <m>
 *   2. values, in argument order (j counts values from 1); integers are
 *      ASCII digits only (leading zeros allowed), value < 2^53; limit >= 1
 *        EMQWIRE EMQ.<TOKEN> value <j> must be an integer
 *   3. row key, where the verb takes both P job:<id> and the id: the row key
 *      must equal P + "job:" + id, where P is the first key that is not the
 *      row key, up to and including its last ':' (the whole key when it has
 *      no ':' is not a prefix: P is then empty)
 *        EMQWIRE EMQ.<TOKEN> key <i> must be job:<id>
 *   4. layout (native only): key i must be emq:{q}:<role of position i>,
 *      q non-empty, without '}', the same q as key 1; the row key's role
 *      text is "job:<id>"
 *        EMQWIRE EMQ.<TOKEN> key <i> must be <role>
 *   5. the brand fence (native only): GET {emq}:version as the caller (ACL
 *      applies), only read
 *        absent                  EMQWIRE expected echomq:6.0.0 found nil
 *        another string          EMQWIRE expected echomq:6.0.0 found <value>
 *        not a string            the server's WRONGTYPE error, passed through
 *        no ACL access to it     NOPERM this user has no permissions to access one of the keys used as arguments
 *      (<value> has CR, LF and NUL bytes replaced by spaces)
 *   6. now is read once (cached clock where the server has one), then the
 *      domain reads and writes of job-core.md.
 *
 * Every write goes through EMQ_Call with "!", so the AOF and replicas see
 * the plain commands. Keys not named in the call (derived rows, the pause
 * flag) are read and written with "C" so ACL applies to them; every derived
 * row a verb will write is read first, so an ACL refusal on one happens
 * before the first write. A refused call replies the NOPERM text above.
 *
 * Test builds: -DEMQ_BREAK_<TOKEN> makes that one verb subtly wrong (see
 * the BREAK notes next to each verb), to prove a differential check catches
 * a broken verb. -DEMQ_LIVE_CLOCK ignores the server's cached clock (see
 * emq_api_init), to prove the tests of the clock choice can fail. Never ship
 * such a build.
 */
#include "emq.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#define EMQ_WIRE "echomq:6.0.0"
#define EMQ_MODULE_VERSION 100 /* 0.1.0 */
#define EMQ_MODULE_VERSION_TEXT "0.1.0"
#define EMQ_VERSION_KEY "{emq}:version"
#define EMQ_NOPERM "NOPERM this user has no permissions to access one of the keys used as arguments"
#define EMQ_MAX_INT 9007199254740992LL /* 2^53, exclusive bound of integer values */

/* ---- roles, value kinds and the verb table ---------------------------- */

enum role { R_JOB, R_PENDING, R_DELAYED, R_ACTIVE, R_DONE, R_DEAD, R_PAUSED };
static const char *const role_text[] = {"job:<id>", "pending", "delayed", "active",
                                        "done", "dead", "paused"};

enum kind { V_ID, V_TEXT, V_INT, V_LIMIT };

struct call;
typedef int (*verb_fn)(EmqCtx *ctx, struct call *c);

typedef struct verb {
    const char *token; /* as in errors: EMQ.<token> */
    const char *name;  /* registered command name */
    int nkeys;
    int roles[6];
    int nvals;
    int kinds[4];
    int row; /* 1-based position of P job:<id>, 0 when none (the id is then not a value) */
    verb_fn run;
} verb;

typedef struct call {
    const verb *v;
    EmqString **keys;
    EmqString **vals;
    long long ints[4]; /* parsed integer values, by value index */
    const char *prefix; /* "emq:{q}:" taken from key 1 */
    size_t plen;
    long long now;
} call;

static char run_id[64]; /* the server's run_id, read once at load */

/* ---- small helpers ------------------------------------------------------ */

static const char *arg(EmqString *s, size_t *len) { return EMQ_StringPtrLen(s, len); }

/* reply_errorf sends one error reply built with printf-style formatting. */
static int reply_errorf(EmqCtx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reply_errorf(EmqCtx *ctx, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return EMQ_ReplyWithError(ctx, buf);
}

/* reply_error_bytes sends an error whose text is prefix followed by the
 * given bytes, with CR, LF and NUL replaced by spaces. */
static int reply_error_bytes(EmqCtx *ctx, const char *prefix, const char *b, size_t n) {
    size_t pl = strlen(prefix);
    char *buf = EMQ_Alloc(pl + n + 1);
    memcpy(buf, prefix, pl);
    for (size_t i = 0; i < n; i++) {
        char ch = b[i];
        buf[pl + i] = (ch == '\r' || ch == '\n' || ch == '\0') ? ' ' : ch;
    }
    buf[pl + n] = '\0';
    EMQ_ReplyWithError(ctx, buf);
    EMQ_Free(buf);
    return EMQ_OK;
}

/* failed reports whether a call reply is missing or an error; if so it has
 * replied to the client with the matching error and freed the reply. */
static int failed(EmqCtx *ctx, EmqCallReply *r) {
    if (r == NULL) {
        if (errno == EACCES)
            EMQ_ReplyWithError(ctx, EMQ_NOPERM);
        else
            reply_errorf(ctx, "ERR emq: internal call failed (errno %d)", errno);
        return 1;
    }
    if (EMQ_CallReplyType(r) == EMQ_REPLY_ERROR) {
        size_t n = 0;
        const char *s = EMQ_CallReplyStringPtr(r, &n);
        if (s == NULL || n == 0)
            EMQ_ReplyWithError(ctx, "ERR emq: internal call failed");
        else
            reply_error_bytes(ctx, "", s, n);
        EMQ_FreeCallReply(r);
        return 1;
    }
    return 0;
}

/* done_int frees r and returns its integer (0 when it is not one). */
static long long done_int(EmqCallReply *r) {
    long long v = EMQ_CallReplyType(r) == EMQ_REPLY_INTEGER ? EMQ_CallReplyInteger(r) : 0;
    EMQ_FreeCallReply(r);
    return v;
}

/* parse_digits parses s as ASCII digits only into [0, 2^53). */
static int parse_digits(const char *s, size_t n, long long *out) {
    if (n == 0) return 0;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
        if (v >= EMQ_MAX_INT) return 0;
    }
    *out = v;
    return 1;
}

/* reply_parse_int parses a reply's string as a decimal integer (for the
 * attempts field); missing or malformed reads as 0. */
static long long reply_int_field(EmqCallReply *r) {
    if (EMQ_CallReplyType(r) == EMQ_REPLY_INTEGER) return EMQ_CallReplyInteger(r);
    if (EMQ_CallReplyType(r) != EMQ_REPLY_STRING) return 0;
    size_t n = 0;
    const char *s = EMQ_CallReplyStringPtr(r, &n);
    long long v = 0;
    int neg = 0;
    size_t i = 0;
    if (n > 0 && s[0] == '-') { neg = 1; i = 1; }
    for (; i < n && i < 20; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    return neg ? -v : v;
}

/* now_ms is the server's time in ms: the command's cached clock where the
 * server has one, else the live clock. */
static long long now_ms(void) {
    if (EMQ_CachedMicroseconds) return EMQ_CachedMicroseconds() / 1000;
    return EMQ_Milliseconds();
}

/* row_key builds P + "job:" + id into a fresh buffer (free with EMQ_Free). */
static char *row_key(const call *c, const char *id, size_t idlen, size_t *len) {
    *len = c->plen + 4 + idlen;
    char *k = EMQ_Alloc(*len + 1);
    memcpy(k, c->prefix, c->plen);
    memcpy(k + c->plen, "job:", 4);
    memcpy(k + c->plen + 4, id, idlen);
    k[*len] = '\0';
    return k;
}

/* ---- checks ------------------------------------------------------------- */

/* check_numkeys validates numkeys as EVALSHA does; on success *nk is set. */
static int check_numkeys(EmqCtx *ctx, EmqString **argv, int argc, long long *nk) {
    if (argc < 2) {
        EMQ_ReplyWithError(ctx, "ERR wrong number of arguments");
        return 0;
    }
    if (EMQ_StringToLongLong(argv[1], nk) != EMQ_OK) {
        EMQ_ReplyWithError(ctx, "ERR value is not an integer or out of range");
        return 0;
    }
    if (*nk > (long long)(argc - 2)) {
        EMQ_ReplyWithError(ctx, "ERR Number of keys can't be greater than number of args");
        return 0;
    }
    if (*nk < 0) {
        EMQ_ReplyWithError(ctx, "ERR Number of keys can't be negative");
        return 0;
    }
    return 1;
}

/* queue_of splits key as emq:{q}:rest; returns 0 when it is not that shape. */
static int queue_of(const char *k, size_t n, const char **q, size_t *qlen, const char **rest,
                    size_t *rlen) {
    if (n < 5 || memcmp(k, "emq:{", 5) != 0) return 0;
    const char *close = memchr(k + 5, '}', n - 5);
    if (close == NULL || close == k + 5) return 0;
    size_t after = (size_t)(close - k) + 1;
    if (after >= n || k[after] != ':') return 0;
    *q = k + 5;
    *qlen = (size_t)(close - (k + 5));
    *rest = k + after + 1;
    *rlen = n - after - 1;
    return 1;
}

/* last_colon_prefix is the length of s up to and including its last ':'. */
static size_t last_colon_prefix(const char *s, size_t n) {
    for (size_t i = n; i > 0; i--)
        if (s[i - 1] == ':') return i;
    return 0;
}

/* check_call runs steps 1 to 5 of the order above. */
static int check_call(EmqCtx *ctx, const verb *v, EmqString **argv, int argc, call *c) {
    long long nk;
    if (!check_numkeys(ctx, argv, argc, &nk)) return 0;
    long long nv = (long long)(argc - 2) - nk;
    if (nk != v->nkeys) {
        reply_errorf(ctx, "EMQWIRE EMQ.%s wants %d keys, got %lld", v->token, v->nkeys, nk);
        return 0;
    }
    if (nv != v->nvals) {
        reply_errorf(ctx, "EMQWIRE EMQ.%s wants %d values, got %lld", v->token, v->nvals, nv);
        return 0;
    }
    c->v = v;
    c->keys = argv + 2;
    c->vals = argv + 2 + nk;

    for (int j = 0; j < v->nvals; j++) {
        c->ints[j] = 0;
        if (v->kinds[j] != V_INT && v->kinds[j] != V_LIMIT) continue;
        size_t n;
        const char *s = arg(c->vals[j], &n);
        long long x;
        if (!parse_digits(s, n, &x) || (v->kinds[j] == V_LIMIT && x < 1)) {
            reply_errorf(ctx, "EMQWIRE EMQ.%s value %d must be an integer", v->token, j + 1);
            return 0;
        }
        c->ints[j] = x;
    }

    if (v->row) {
        int other = v->row == 1 ? 1 : 0; /* index of the first key that is not the row */
        size_t on, rn, idn;
        const char *o = arg(c->keys[other], &on);
        const char *r = arg(c->keys[v->row - 1], &rn);
        const char *id = arg(c->vals[0], &idn);
        size_t pl = last_colon_prefix(o, on);
        if (rn != pl + 4 + idn || memcmp(r, o, pl) != 0 || memcmp(r + pl, "job:", 4) != 0 ||
            memcmp(r + pl + 4, id, idn) != 0) {
            reply_errorf(ctx, "EMQWIRE EMQ.%s key %d must be job:<id>", v->token, v->row);
            return 0;
        }
    }

    const char *q1 = NULL;
    size_t q1n = 0;
    for (int i = 0; i < v->nkeys; i++) {
        size_t n, qn, rn;
        const char *k = arg(c->keys[i], &n);
        const char *q, *rest;
        int role = v->roles[i];
        int ok = queue_of(k, n, &q, &qn, &rest, &rn);
        if (ok && i > 0) ok = qn == q1n && memcmp(q, q1, qn) == 0;
        if (ok) {
            const char *want = role == R_JOB ? "job:" : role_text[role];
            size_t wn = strlen(want);
            ok = role == R_JOB ? (rn > wn && memcmp(rest, want, wn) == 0)
                               : (rn == wn && memcmp(rest, want, wn) == 0);
        }
        if (!ok) {
            reply_errorf(ctx, "EMQWIRE EMQ.%s key %d must be %s", v->token, i + 1, role_text[role]);
            return 0;
        }
        if (i == 0) {
            q1 = q;
            q1n = qn;
            c->prefix = k;
            c->plen = (size_t)(rest - k);
        }
    }

    /* The fence: read the brand as the caller; never write. */
    EmqCallReply *r = EMQ_Call(ctx, "GET", "Cc", EMQ_VERSION_KEY);
    if (failed(ctx, r)) return 0;
    int t = EMQ_CallReplyType(r);
    if (t == EMQ_REPLY_NULL) {
        EMQ_FreeCallReply(r);
        EMQ_ReplyWithError(ctx, "EMQWIRE expected " EMQ_WIRE " found nil");
        return 0;
    }
    size_t bn = 0;
    const char *b = EMQ_CallReplyStringPtr(r, &bn);
    if (b == NULL) b = "";
    if (bn != strlen(EMQ_WIRE) || memcmp(b, EMQ_WIRE, bn) != 0) {
        reply_error_bytes(ctx, "EMQWIRE expected " EMQ_WIRE " found ", b, bn);
        EMQ_FreeCallReply(r);
        return 0;
    }
    EMQ_FreeCallReply(r);
    c->now = now_ms();
    return 1;
}

/* ---- the verbs ---------------------------------------------------------- */

/* in_set reports 1 when id is in the set, 0 when not, -1 after an error reply. */
static int in_set(EmqCtx *ctx, EmqString *set, EmqString *id) {
    EmqCallReply *r = EMQ_Call(ctx, "ZSCORE", "ss", set, id);
    if (failed(ctx, r)) return -1;
    int in = EMQ_CallReplyType(r) != EMQ_REPLY_NULL;
    EMQ_FreeCallReply(r);
    return in;
}

/* exists reports 1 when key exists, 0 when not, -1 after an error reply. */
static int exists(EmqCtx *ctx, EmqString *key) {
    EmqCallReply *r = EMQ_Call(ctx, "EXISTS", "s", key);
    if (failed(ctx, r)) return -1;
    return done_int(r) > 0;
}

/* w runs a write whose reply is not needed; returns 0 after an error reply. */
#define W(call_expr)                          \
    do {                                      \
        EmqCallReply *wr_ = (call_expr);      \
        if (failed(ctx, wr_)) return EMQ_OK;  \
        EMQ_FreeCallReply(wr_);               \
    } while (0)

/* single_active is the common head of verbs that act on one id in one set:
 * 1 proceed, 0 not a member or an orphan (removed; *reply has been sent
 * with notval), -1 after an error reply. */
static int member_with_row(EmqCtx *ctx, EmqString *set, EmqString *row, EmqString *id,
                           long long notval) {
    int in = in_set(ctx, set, id);
    if (in < 0) return -1;
    if (!in) {
        EMQ_ReplyWithLongLong(ctx, notval);
        return 0;
    }
    int has = exists(ctx, row);
    if (has < 0) return -1;
    if (!has) { /* orphan: drop it from the set, write no row */
        EmqCallReply *r = EMQ_Call(ctx, "ZREM", "!ss", set, id);
        if (failed(ctx, r)) return -1;
        EMQ_FreeCallReply(r);
        EMQ_ReplyWithLongLong(ctx, notval);
        return 0;
    }
    return 1;
}

static int do_enqueue(EmqCtx *ctx, call *c) {
    EmqString *row = c->keys[0], *pending = c->keys[1], *id = c->vals[0], *payload = c->vals[1];
    int has = exists(ctx, row);
    if (has < 0) return EMQ_OK;
    if (has) return EMQ_ReplyWithLongLong(ctx, 0);
#ifdef EMQ_BREAK_ENQUEUE /* BREAK: a new row starts at attempts 1 */
    W(EMQ_Call(ctx, "HSET", "!scccccs", row, "state", "pending", "attempts", "1", "payload", payload));
#else
    W(EMQ_Call(ctx, "HSET", "!scccccs", row, "state", "pending", "attempts", "0", "payload", payload));
#endif
    W(EMQ_Call(ctx, "ZADD", "!scs", pending, "0", id));
    return EMQ_ReplyWithLongLong(ctx, 1);
}

/* claim_one leases id when its row exists: 1 claimed and replied, 0 an
 * orphan (dropped from pending), -1 after an error reply. */
static int claim_one(EmqCtx *ctx, call *c, const char *id, size_t idn, long long deadline) {
    EmqString *pending = c->keys[0], *active = c->keys[1];
    size_t rn;
    char *row = row_key(c, id, idn, &rn);
    int st = -1;
    EmqCallReply *r = EMQ_Call(ctx, "EXISTS", "Cb", row, rn);
    if (failed(ctx, r)) goto out;
    int has = done_int(r) > 0;
    r = EMQ_Call(ctx, "ZREM", "!sb", pending, id, idn);
    if (failed(ctx, r)) goto out;
    EMQ_FreeCallReply(r);
    if (!has) {
        st = 0;
        goto out;
    }
    r = EMQ_Call(ctx, "ZADD", "!slb", active, deadline, id, idn);
    if (failed(ctx, r)) goto out;
    EMQ_FreeCallReply(r);
    r = EMQ_Call(ctx, "HSET", "C!bcccc", row, rn, "state", "active", "lease_epoch", run_id);
    if (failed(ctx, r)) goto out;
    EMQ_FreeCallReply(r);
#ifdef EMQ_BREAK_CLAIM /* BREAK: attempts grows by 2 */
    r = EMQ_Call(ctx, "HINCRBY", "C!bcc", row, rn, "attempts", "2");
#else
    r = EMQ_Call(ctx, "HINCRBY", "C!bcc", row, rn, "attempts", "1");
#endif
    if (failed(ctx, r)) goto out;
    long long attempts = done_int(r);
    r = EMQ_Call(ctx, "HGET", "Cbc", row, rn, "payload");
    if (failed(ctx, r)) goto out;
    EMQ_ReplyWithArray(ctx, 3);
    EMQ_ReplyWithStringBuffer(ctx, id, idn);
    if (EMQ_CallReplyType(r) == EMQ_REPLY_STRING) {
        size_t pn = 0;
        const char *p = EMQ_CallReplyStringPtr(r, &pn);
        EMQ_ReplyWithStringBuffer(ctx, p, pn);
    } else {
        EMQ_ReplyWithNull(ctx);
    }
    EMQ_FreeCallReply(r);
    EMQ_ReplyWithLongLong(ctx, attempts);
    st = 1;
out:
    EMQ_Free(row);
    return st;
}

static int do_claim(EmqCtx *ctx, call *c) {
    EmqString *pending = c->keys[0];
    long long deadline = c->now + c->ints[0];
    char *paused = EMQ_Alloc(c->plen + 7);
    memcpy(paused, c->prefix, c->plen);
    memcpy(paused + c->plen, "paused", 7);
    EmqCallReply *r = EMQ_Call(ctx, "EXISTS", "Cb", paused, c->plen + 6);
    EMQ_Free(paused);
    if (failed(ctx, r)) return EMQ_OK;
    if (done_int(r) > 0) return EMQ_ReplyWithArray(ctx, 0);

    for (;;) { /* each pass removes one id from pending, so this ends */
        r = EMQ_Call(ctx, "ZRANGE", "scc", pending, "0", "0");
        if (failed(ctx, r)) return EMQ_OK;
        if (EMQ_CallReplyType(r) != EMQ_REPLY_ARRAY || EMQ_CallReplyLength(r) == 0) {
            EMQ_FreeCallReply(r);
            return EMQ_ReplyWithArray(ctx, 0);
        }
        size_t idn = 0;
        const char *ip = EMQ_CallReplyStringPtr(EMQ_CallReplyArrayElement(r, 0), &idn);
        char *id = EMQ_Alloc(idn + 1);
        memcpy(id, ip, idn);
        EMQ_FreeCallReply(r);
        int st = claim_one(ctx, c, id, idn, deadline);
        EMQ_Free(id);
        if (st != 0) return EMQ_OK;
    }
}

static int do_extend(EmqCtx *ctx, call *c) {
    EmqString *active = c->keys[0], *row = c->keys[1], *id = c->vals[0];
    long long deadline = c->now + c->ints[1];
    int m = member_with_row(ctx, active, row, id, 0);
    if (m <= 0) return EMQ_OK;
    W(EMQ_Call(ctx, "ZADD", "!scls", active, "XX", deadline, id));
    W(EMQ_Call(ctx, "HSET", "!scc", row, "lease_epoch", run_id));
#ifdef EMQ_BREAK_EXTEND /* BREAK: the reply is one ms past the deadline written */
    deadline++;
#endif
    return EMQ_ReplyWithLongLong(ctx, deadline);
}

static int do_complete(EmqCtx *ctx, call *c) {
    EmqString *active = c->keys[0], *row = c->keys[1], *done = c->keys[2], *id = c->vals[0];
    int m = member_with_row(ctx, active, row, id, 0);
    if (m <= 0) return EMQ_OK;
    long long at = c->now;
#ifdef EMQ_BREAK_COMPLETE /* BREAK: the done score is one second late */
    at += 1000;
#endif
    W(EMQ_Call(ctx, "ZREM", "!ss", active, id));
    W(EMQ_Call(ctx, "HSET", "!scc", row, "state", "done"));
    W(EMQ_Call(ctx, "ZADD", "!sls", done, at, id));
    return EMQ_ReplyWithLongLong(ctx, 1);
}

static int do_fail(EmqCtx *ctx, call *c) {
    EmqString *active = c->keys[0], *row = c->keys[1], *delayed = c->keys[2], *dead = c->keys[3];
    EmqString *id = c->vals[0], *err = c->vals[1];
    long long max = c->ints[2], backoff = c->ints[3];
    int m = member_with_row(ctx, active, row, id, -1);
    if (m <= 0) return EMQ_OK;
    EmqCallReply *r = EMQ_Call(ctx, "HGET", "sc", row, "attempts");
    if (failed(ctx, r)) return EMQ_OK;
    long long attempts = reply_int_field(r);
    EMQ_FreeCallReply(r);
    W(EMQ_Call(ctx, "ZREM", "!ss", active, id));
#ifdef EMQ_BREAK_FAIL /* BREAK: one more try than max_attempts allows */
    int retry = attempts <= max;
#else
    int retry = attempts < max;
#endif
    if (retry) {
        long long at = c->now + backoff;
        W(EMQ_Call(ctx, "HSET", "!scccs", row, "state", "delayed", "error", err));
        W(EMQ_Call(ctx, "ZADD", "!sls", delayed, at, id));
        return EMQ_ReplyWithLongLong(ctx, at);
    }
    W(EMQ_Call(ctx, "HSET", "!scccs", row, "state", "dead", "error", err));
    W(EMQ_Call(ctx, "ZADD", "!sls", dead, c->now, id));
    return EMQ_ReplyWithLongLong(ctx, 0);
}

static int do_retry(EmqCtx *ctx, call *c) {
    EmqString *dead = c->keys[0], *row = c->keys[1], *pending = c->keys[2], *id = c->vals[0];
    int m = member_with_row(ctx, dead, row, id, 0);
    if (m <= 0) return EMQ_OK;
    W(EMQ_Call(ctx, "ZREM", "!ss", dead, id));
    W(EMQ_Call(ctx, "HSET", "!scccc", row, "state", "pending", "attempts", "0"));
#ifndef EMQ_BREAK_RETRY /* BREAK: the error field survives a retry */
    W(EMQ_Call(ctx, "HDEL", "!sc", row, "error"));
#endif
    W(EMQ_Call(ctx, "ZADD", "!scs", pending, "0", id));
    return EMQ_ReplyWithLongLong(ctx, 1);
}

static int do_cancel(EmqCtx *ctx, call *c) {
    EmqString *pending = c->keys[0], *delayed = c->keys[1], *row = c->keys[2], *id = c->vals[0];
    int inp = in_set(ctx, pending, id);
    if (inp < 0) return EMQ_OK;
    int ind = in_set(ctx, delayed, id);
    if (ind < 0) return EMQ_OK;
    if (!inp && !ind) return EMQ_ReplyWithLongLong(ctx, 0);
    int has = exists(ctx, row);
    if (has < 0) return EMQ_OK;
    if (inp) W(EMQ_Call(ctx, "ZREM", "!ss", pending, id));
    if (ind) W(EMQ_Call(ctx, "ZREM", "!ss", delayed, id));
    if (!has) return EMQ_ReplyWithLongLong(ctx, 0); /* orphan */
#ifdef EMQ_BREAK_CANCEL /* BREAK: the state is spelled differently */
    W(EMQ_Call(ctx, "HSET", "!scc", row, "state", "canceled"));
#else
    W(EMQ_Call(ctx, "HSET", "!scc", row, "state", "cancelled"));
#endif
    return EMQ_ReplyWithLongLong(ctx, 1);
}

/* window reads up to limit ids of set with score in range (lowest first)
 * and whether each one's row exists (read as the caller, before any
 * write). Returns the reply holding the ids (free it), or NULL after an
 * error reply; *has is allocated (free with EMQ_Free) when n > 0. */
static EmqCallReply *window(EmqCtx *ctx, call *c, EmqString *set, const char *max,
                            long long limit, size_t *n, char **has) {
    EmqCallReply *ids = EMQ_Call(ctx, "ZRANGEBYSCORE", "scccll", set, "-inf", max, "LIMIT", 0LL, limit);
    if (failed(ctx, ids)) return NULL;
    *n = EMQ_CallReplyType(ids) == EMQ_REPLY_ARRAY ? EMQ_CallReplyLength(ids) : 0;
    *has = NULL;
    if (*n == 0) return ids;
    *has = EMQ_Alloc(*n);
    for (size_t i = 0; i < *n; i++) {
        size_t idn = 0, rn;
        const char *id = EMQ_CallReplyStringPtr(EMQ_CallReplyArrayElement(ids, i), &idn);
        char *row = row_key(c, id, idn, &rn);
        EmqCallReply *r = EMQ_Call(ctx, "EXISTS", "Cb", row, rn);
        EMQ_Free(row);
        if (failed(ctx, r)) {
            EMQ_Free(*has);
            EMQ_FreeCallReply(ids);
            return NULL;
        }
        (*has)[i] = done_int(r) > 0;
    }
    return ids;
}

static int do_promote(EmqCtx *ctx, call *c) {
    EmqString *delayed = c->keys[0], *pending = c->keys[1];
    char max[32];
    snprintf(max, sizeof max, "%lld", c->now);
    size_t n;
    char *has;
    EmqCallReply *ids = window(ctx, c, delayed, max, c->ints[0], &n, &has);
    if (ids == NULL) return EMQ_OK;
    long long moved = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        size_t idn = 0, rn;
        const char *id = EMQ_CallReplyStringPtr(EMQ_CallReplyArrayElement(ids, i), &idn);
        EmqCallReply *r = EMQ_Call(ctx, "ZREM", "!sb", delayed, id, idn);
        if (failed(ctx, r)) { ok = 0; break; }
        EMQ_FreeCallReply(r);
        if (!has[i]) continue; /* orphan: dropped, counts toward limit only */
#ifdef EMQ_BREAK_PROMOTE /* BREAK: promoted ids land at score 1 */
        r = EMQ_Call(ctx, "ZADD", "!scb", pending, "1", id, idn);
#else
        r = EMQ_Call(ctx, "ZADD", "!scb", pending, "0", id, idn);
#endif
        if (failed(ctx, r)) { ok = 0; break; }
        EMQ_FreeCallReply(r);
        char *row = row_key(c, id, idn, &rn);
        r = EMQ_Call(ctx, "HSET", "C!bcc", row, rn, "state", "pending");
        EMQ_Free(row);
        if (failed(ctx, r)) { ok = 0; break; }
        EMQ_FreeCallReply(r);
        moved++;
    }
    if (has) EMQ_Free(has);
    EMQ_FreeCallReply(ids);
    if (ok) EMQ_ReplyWithLongLong(ctx, moved);
    return EMQ_OK;
}

/* reap_one moves one leased id whose row exists to dead or pending;
 * returns 0 after an error reply. */
static int reap_one(EmqCtx *ctx, call *c, const char *row, size_t rn, const char *id, size_t idn,
                    EmqString *pending, EmqString *dead, long long max_attempts) {
    EmqCallReply *r = EMQ_Call(ctx, "HGET", "Cbc", row, rn, "attempts");
    if (failed(ctx, r)) return 0;
    long long attempts = reply_int_field(r);
    EMQ_FreeCallReply(r);
    if (attempts >= max_attempts) {
        r = EMQ_Call(ctx, "HSET", "C!bcccc", row, rn, "state", "dead", "error", "lease-expired");
        if (failed(ctx, r)) return 0;
        EMQ_FreeCallReply(r);
        r = EMQ_Call(ctx, "ZADD", "!slb", dead, c->now, id, idn);
    } else {
        r = EMQ_Call(ctx, "HSET", "C!bcc", row, rn, "state", "pending");
        if (failed(ctx, r)) return 0;
        EMQ_FreeCallReply(r);
        r = EMQ_Call(ctx, "ZADD", "!scb", pending, "0", id, idn);
    }
    if (failed(ctx, r)) return 0;
    EMQ_FreeCallReply(r);
    return 1;
}

static int do_reap(EmqCtx *ctx, call *c) {
    EmqString *active = c->keys[0], *pending = c->keys[1], *dead = c->keys[2];
    long long max_attempts = c->ints[1];
    char max[32];
#ifdef EMQ_BREAK_REAP /* BREAK: leases ending within the next minute are reaped too */
    snprintf(max, sizeof max, "(%lld", c->now + 60000);
#else
    snprintf(max, sizeof max, "(%lld", c->now);
#endif
    size_t n;
    char *has;
    EmqCallReply *ids = window(ctx, c, active, max, c->ints[0], &n, &has);
    if (ids == NULL) return EMQ_OK;
    long long reaped = 0;
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        size_t idn = 0, rn;
        const char *id = EMQ_CallReplyStringPtr(EMQ_CallReplyArrayElement(ids, i), &idn);
        EmqCallReply *r = EMQ_Call(ctx, "ZREM", "!sb", active, id, idn);
        if (failed(ctx, r)) { ok = 0; break; }
        EMQ_FreeCallReply(r);
        if (!has[i]) continue; /* orphan */
        char *row = row_key(c, id, idn, &rn);
        int st = reap_one(ctx, c, row, rn, id, idn, pending, dead, max_attempts);
        EMQ_Free(row);
        if (!st) { ok = 0; break; }
        reaped++;
    }
    if (has) EMQ_Free(has);
    EMQ_FreeCallReply(ids);
    if (ok) EMQ_ReplyWithLongLong(ctx, reaped);
    return EMQ_OK;
}

static int do_pause(EmqCtx *ctx, call *c) {
#ifdef EMQ_BREAK_PAUSE /* BREAK: the flag holds 2 */
    EmqCallReply *r = EMQ_Call(ctx, "SET", "!scc", c->keys[0], "2", "NX");
#else
    EmqCallReply *r = EMQ_Call(ctx, "SET", "!scc", c->keys[0], "1", "NX");
#endif
    if (failed(ctx, r)) return EMQ_OK;
    int set = EMQ_CallReplyType(r) != EMQ_REPLY_NULL;
    EMQ_FreeCallReply(r);
    return EMQ_ReplyWithLongLong(ctx, set);
}

static int do_resume(EmqCtx *ctx, call *c) {
    EmqCallReply *r = EMQ_Call(ctx, "DEL", "!s", c->keys[0]);
    if (failed(ctx, r)) return EMQ_OK;
    long long n = done_int(r);
#ifdef EMQ_BREAK_RESUME /* BREAK: always reports a resumed queue */
    n = 1;
#endif
    return EMQ_ReplyWithLongLong(ctx, n > 0);
}

static int do_remove(EmqCtx *ctx, call *c) {
    EmqString *id = c->vals[0];
    long long removed = 0;
    EmqCallReply *r = EMQ_Call(ctx, "DEL", "!s", c->keys[0]);
    if (failed(ctx, r)) return EMQ_OK;
    removed += done_int(r);
#ifdef EMQ_BREAK_REMOVE /* BREAK: the id stays in the dead set */
    int sets = 4;
#else
    int sets = 5;
#endif
    for (int i = 1; i <= sets; i++) {
        r = EMQ_Call(ctx, "ZREM", "!ss", c->keys[i], id);
        if (failed(ctx, r)) return EMQ_OK;
        removed += done_int(r);
    }
    return EMQ_ReplyWithLongLong(ctx, removed > 0);
}

static int do_reschedule(EmqCtx *ctx, call *c) {
    EmqString *row = c->keys[0], *pending = c->keys[1], *delayed = c->keys[2], *id = c->vals[0];
    long long run_at = c->ints[1];
#ifdef EMQ_BREAK_RESCHEDULE /* BREAK: the run-at is one ms late */
    run_at++;
#endif
    int has = exists(ctx, row);
    if (has < 0) return EMQ_OK;
    if (!has) { /* orphan rule: an id in pending or delayed with no row is dropped */
        W(EMQ_Call(ctx, "ZREM", "!ss", pending, id));
        W(EMQ_Call(ctx, "ZREM", "!ss", delayed, id));
        return EMQ_ReplyWithLongLong(ctx, 0);
    }
    EmqCallReply *r = EMQ_Call(ctx, "HGET", "sc", row, "state");
    if (failed(ctx, r)) return EMQ_OK;
    size_t sn = 0;
    const char *s = EMQ_CallReplyType(r) == EMQ_REPLY_STRING ? EMQ_CallReplyStringPtr(r, &sn) : NULL;
    int ok = s != NULL && ((sn == 7 && memcmp(s, "pending", 7) == 0) ||
                           (sn == 7 && memcmp(s, "delayed", 7) == 0));
    EMQ_FreeCallReply(r);
    if (!ok) return EMQ_ReplyWithLongLong(ctx, 0);
    W(EMQ_Call(ctx, "ZREM", "!ss", pending, id));
    W(EMQ_Call(ctx, "ZADD", "!sls", delayed, run_at, id));
    W(EMQ_Call(ctx, "HSET", "!scc", row, "state", "delayed"));
    return EMQ_ReplyWithLongLong(ctx, 1);
}

static int do_requeue(EmqCtx *ctx, call *c) {
    EmqString *active = c->keys[0], *row = c->keys[1], *pending = c->keys[2], *id = c->vals[0];
    int m = member_with_row(ctx, active, row, id, 0);
    if (m <= 0) return EMQ_OK;
    W(EMQ_Call(ctx, "ZREM", "!ss", active, id));
    W(EMQ_Call(ctx, "ZADD", "!scs", pending, "0", id));
    W(EMQ_Call(ctx, "HSET", "!scc", row, "state", "pending"));
    W(EMQ_Call(ctx, "HINCRBY", "!scc", row, "attempts", "-1"));
#ifndef EMQ_BREAK_REQUEUE /* BREAK: lease_epoch survives a requeue */
    W(EMQ_Call(ctx, "HDEL", "!sc", row, "lease_epoch"));
#endif
    return EMQ_ReplyWithLongLong(ctx, 1);
}

/* The fourteen verbs, in the order of the job-core contract. */
static const verb verbs[] = {
    {"ENQUEUE", "emq.enqueue", 2, {R_JOB, R_PENDING}, 2, {V_ID, V_TEXT}, 1, do_enqueue},
    {"CLAIM", "emq.claim", 2, {R_PENDING, R_ACTIVE}, 1, {V_INT}, 0, do_claim},
    {"EXTEND", "emq.extend", 2, {R_ACTIVE, R_JOB}, 2, {V_ID, V_INT}, 2, do_extend},
    {"COMPLETE", "emq.complete", 3, {R_ACTIVE, R_JOB, R_DONE}, 1, {V_ID}, 2, do_complete},
    {"FAIL", "emq.fail", 4, {R_ACTIVE, R_JOB, R_DELAYED, R_DEAD}, 4, {V_ID, V_TEXT, V_INT, V_INT}, 2, do_fail},
    {"RETRY", "emq.retry", 3, {R_DEAD, R_JOB, R_PENDING}, 1, {V_ID}, 2, do_retry},
    {"CANCEL", "emq.cancel", 3, {R_PENDING, R_DELAYED, R_JOB}, 1, {V_ID}, 3, do_cancel},
    {"PROMOTE", "emq.promote", 2, {R_DELAYED, R_PENDING}, 1, {V_LIMIT}, 0, do_promote},
    {"REAP", "emq.reap", 3, {R_ACTIVE, R_PENDING, R_DEAD}, 2, {V_LIMIT, V_INT}, 0, do_reap},
    {"PAUSE", "emq.pause", 1, {R_PAUSED}, 0, {0}, 0, do_pause},
    {"RESUME", "emq.resume", 1, {R_PAUSED}, 0, {0}, 0, do_resume},
    {"REMOVE", "emq.remove", 6, {R_JOB, R_PENDING, R_DELAYED, R_ACTIVE, R_DONE, R_DEAD}, 1, {V_ID}, 1, do_remove},
    {"RESCHEDULE", "emq.reschedule", 3, {R_JOB, R_PENDING, R_DELAYED}, 2, {V_ID, V_INT}, 1, do_reschedule},
    {"REQUEUE", "emq.requeue", 3, {R_ACTIVE, R_JOB, R_PENDING}, 1, {V_ID}, 2, do_requeue},
};
#define NVERBS ((int)(sizeof verbs / sizeof verbs[0]))

/* dispatch finds the verb by the command name the server called. */
static int dispatch(EmqCtx *ctx, EmqString **argv, int argc, int which) {
    call c;
    memset(&c, 0, sizeof c);
    if (!check_call(ctx, &verbs[which], argv, argc, &c)) return EMQ_OK;
    return verbs[which].run(ctx, &c);
}

/* One entry point per verb: the server passes no per-command data. */
#define ENTRY(i) \
    static int cmd_##i(EmqCtx *ctx, EmqString **argv, int argc) { return dispatch(ctx, argv, argc, i); }
ENTRY(0) ENTRY(1) ENTRY(2) ENTRY(3) ENTRY(4) ENTRY(5) ENTRY(6)
ENTRY(7) ENTRY(8) ENTRY(9) ENTRY(10) ENTRY(11) ENTRY(12) ENTRY(13)
static const EmqCmdFunc entries[] = {cmd_0, cmd_1, cmd_2, cmd_3, cmd_4, cmd_5, cmd_6,
                                     cmd_7, cmd_8, cmd_9, cmd_10, cmd_11, cmd_12, cmd_13};
_Static_assert(sizeof entries / sizeof entries[0] == sizeof verbs / sizeof verbs[0],
               "one entry per verb");

/* ---- EMQ.VERSION and EMQ.INSTALL --------------------------------------- */

static int cmd_version(EmqCtx *ctx, EmqString **argv, int argc) {
    (void)argv;
    (void)argc;
    EMQ_ReplyWithArray(ctx, 6);
    EMQ_ReplyWithStringBuffer(ctx, "wire", 4);
    EMQ_ReplyWithStringBuffer(ctx, EMQ_WIRE, strlen(EMQ_WIRE));
    EMQ_ReplyWithStringBuffer(ctx, "module", 6);
    EMQ_ReplyWithStringBuffer(ctx, EMQ_MODULE_VERSION_TEXT, strlen(EMQ_MODULE_VERSION_TEXT));
    EMQ_ReplyWithStringBuffer(ctx, "verbs", 5);
    EMQ_ReplyWithArray(ctx, NVERBS);
    for (int i = 0; i < NVERBS; i++)
        EMQ_ReplyWithStringBuffer(ctx, verbs[i].token, strlen(verbs[i].token));
    return EMQ_OK;
}

/* EMQ.INSTALL 1 {emq}:version: numkeys as the verbs, then
 *   EMQWIRE EMQ.INSTALL wants 1 keys, got <n>
 *   EMQWIRE EMQ.INSTALL wants 0 values, got <m>
 *   EMQWIRE EMQ.INSTALL key 1 must be {emq}:version
 * then it reads the key as the caller: absent -> SET NX echomq:6.0.0, 1;
 * echomq:6.0.0 -> 0; another string -> the fence's text; not a string ->
 * the server's WRONGTYPE. It takes no brand from its caller. */
static int cmd_install(EmqCtx *ctx, EmqString **argv, int argc) {
    long long nk;
    if (!check_numkeys(ctx, argv, argc, &nk)) return EMQ_OK;
    long long nv = (long long)(argc - 2) - nk;
    if (nk != 1) return reply_errorf(ctx, "EMQWIRE EMQ.INSTALL wants 1 keys, got %lld", nk);
    if (nv != 0) return reply_errorf(ctx, "EMQWIRE EMQ.INSTALL wants 0 values, got %lld", nv);
    size_t kn;
    const char *k = arg(argv[2], &kn);
    if (kn != strlen(EMQ_VERSION_KEY) || memcmp(k, EMQ_VERSION_KEY, kn) != 0)
        return EMQ_ReplyWithError(ctx, "EMQWIRE EMQ.INSTALL key 1 must be " EMQ_VERSION_KEY);
    EmqCallReply *r = EMQ_Call(ctx, "GET", "Cc", EMQ_VERSION_KEY);
    if (failed(ctx, r)) return EMQ_OK;
    if (EMQ_CallReplyType(r) == EMQ_REPLY_NULL) {
        EMQ_FreeCallReply(r);
        r = EMQ_Call(ctx, "SET", "C!ccc", EMQ_VERSION_KEY, EMQ_WIRE, "NX");
        if (failed(ctx, r)) return EMQ_OK;
        int set = EMQ_CallReplyType(r) != EMQ_REPLY_NULL;
        EMQ_FreeCallReply(r);
        return EMQ_ReplyWithLongLong(ctx, set);
    }
    size_t bn = 0;
    const char *b = EMQ_CallReplyStringPtr(r, &bn);
    if (b == NULL) b = "";
    if (bn == strlen(EMQ_WIRE) && memcmp(b, EMQ_WIRE, bn) == 0) {
        EMQ_FreeCallReply(r);
        return EMQ_ReplyWithLongLong(ctx, 0);
    }
    reply_error_bytes(ctx, "EMQWIRE expected " EMQ_WIRE " found ", b, bn);
    EMQ_FreeCallReply(r);
    return EMQ_OK;
}

/* ---- loading ------------------------------------------------------------ */

static const EmqCommandInfoVersion info_version = EMQ_COMMAND_INFO_VERSION;

/* register_keyed creates a command whose keys follow numkeys at argv[1]. */
static int register_keyed(EmqCtx *ctx, const char *name, EmqCmdFunc f) {
    if (EMQ_CreateCommand(ctx, name, f, "write deny-oom", 0, 0, 0) != EMQ_OK) return EMQ_ERR;
    EmqCommand *cmd = EMQ_GetCommand(ctx, name);
    if (cmd == NULL) return EMQ_ERR;
    EmqKeySpec specs[2];
    memset(specs, 0, sizeof specs);
    /* RW with ACCESS and UPDATE: ACL then wants both read and write access
     * to every key (RW alone asks for neither). */
    specs[0].flags = EMQ_CMD_KEY_RW | EMQ_CMD_KEY_ACCESS | EMQ_CMD_KEY_UPDATE;
    specs[0].begin_search_type = EMQ_KSPEC_BS_INDEX;
    specs[0].bs.index.pos = 1;
    specs[0].find_keys_type = EMQ_KSPEC_FK_KEYNUM;
    specs[0].fk.keynum.keynumidx = 0;
    specs[0].fk.keynum.firstkey = 1;
    specs[0].fk.keynum.keystep = 1;
    EmqCommandInfo info;
    memset(&info, 0, sizeof info);
    info.version = &info_version;
    info.arity = -2;
    info.key_specs = specs;
    return EMQ_SetCommandInfo(cmd, &info);
}

int RedisModule_OnLoad(EmqCtx *ctx, EmqString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (emq_api_init(ctx) != EMQ_OK) return EMQ_ERR;
    EMQ_SetModuleAttribs(ctx, "emq", EMQ_MODULE_VERSION, EMQ_APIVER);

    EmqServerInfo *info = EMQ_GetServerInfo(ctx, "server");
    if (info == NULL) return EMQ_ERR;
    const char *rid = EMQ_ServerInfoGetFieldC(info, "run_id");
    if (rid == NULL || strlen(rid) == 0 || strlen(rid) >= sizeof run_id) {
        EMQ_FreeServerInfo(ctx, info);
        return EMQ_ERR;
    }
    memcpy(run_id, rid, strlen(rid) + 1);
    EMQ_FreeServerInfo(ctx, info);

    if (EMQ_CreateCommand(ctx, "emq.version", cmd_version, "readonly fast", 0, 0, 0) != EMQ_OK)
        return EMQ_ERR;
    EmqCommand *vc = EMQ_GetCommand(ctx, "emq.version");
    EmqCommandInfo vinfo;
    memset(&vinfo, 0, sizeof vinfo);
    vinfo.version = &info_version;
    vinfo.arity = 1;
    if (vc == NULL || EMQ_SetCommandInfo(vc, &vinfo) != EMQ_OK) return EMQ_ERR;

    if (register_keyed(ctx, "emq.install", cmd_install) != EMQ_OK) return EMQ_ERR;
    for (int i = 0; i < NVERBS; i++)
        if (register_keyed(ctx, verbs[i].name, entries[i]) != EMQ_OK) return EMQ_ERR;
    return EMQ_OK;
}
