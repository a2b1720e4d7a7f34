/*
 * emq.h: the few declarations of the server's module API that emq.c uses.
 *
 * The server hands a module its API as a lookup function whose pointer is
 * the first word of the context passed to RedisModule_OnLoad:
 *     int getapi(const char *name, void *out)   (0 found, 1 missing)
 * emq_api_init() resolves every function below through it, by the name the
 * server exports ("RedisModule_<Name>"). Nothing else of the API is declared
 * here. Layouts and constants are those of the module ABI shared by Redis
 * 7.0+ and Valkey 7.2+; the struct layouts are asserted at compile time.
 */
#ifndef EMQ_H
#define EMQ_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Status codes. */
#define EMQ_OK 0
#define EMQ_ERR 1
#define EMQ_APIVER 1

/* Types of a call reply. */
#define EMQ_REPLY_STRING 0
#define EMQ_REPLY_ERROR 1
#define EMQ_REPLY_INTEGER 2
#define EMQ_REPLY_ARRAY 3
#define EMQ_REPLY_NULL 4

/* Key-spec constants. */
#define EMQ_KSPEC_BS_INDEX 2
#define EMQ_KSPEC_FK_KEYNUM 3
#define EMQ_CMD_KEY_RW (1ULL << 1)
#define EMQ_CMD_KEY_ACCESS (1ULL << 4)
#define EMQ_CMD_KEY_UPDATE (1ULL << 5)

/* Opaque server objects. */
typedef struct EmqCtx EmqCtx;
typedef struct EmqString EmqString;
typedef struct EmqCallReply EmqCallReply;
typedef struct EmqCommand EmqCommand;
typedef struct EmqServerInfo EmqServerInfo;

typedef int (*EmqCmdFunc)(EmqCtx *ctx, EmqString **argv, int argc);

/* One key spec, as the server reads it (56 bytes). */
typedef struct EmqKeySpec {
    const char *notes;
    uint64_t flags;
    int begin_search_type;
    union {
        struct { int pos; } index;
        struct { const char *keyword; int startfrom; } keyword;
    } bs;
    int find_keys_type;
    union {
        struct { int lastkey; int keystep; int limit; } range;
        struct { int keynumidx; int firstkey; int keystep; } keynum;
    } fk;
} EmqKeySpec;

/* The version record that tells the server the sizes of our structs. */
typedef struct EmqCommandInfoVersion {
    int version;
    size_t sizeof_historyentry;
    size_t sizeof_keyspec;
    size_t sizeof_arg;
} EmqCommandInfoVersion;

/* Command info (72 bytes). history and args are never passed (NULL). */
typedef struct EmqCommandInfo {
    const EmqCommandInfoVersion *version;
    const char *summary;
    const char *complexity;
    const char *since;
    void *history;
    const char *tips;
    int arity;
    EmqKeySpec *key_specs;
    void *args;
} EmqCommandInfo;

_Static_assert(sizeof(EmqKeySpec) == 56, "key spec must be 56 bytes");
_Static_assert(offsetof(EmqKeySpec, begin_search_type) == 16, "key spec begin_search_type at 16");
_Static_assert(offsetof(EmqKeySpec, bs) == 24, "key spec bs at 24");
_Static_assert(offsetof(EmqKeySpec, find_keys_type) == 40, "key spec find_keys_type at 40");
_Static_assert(offsetof(EmqKeySpec, fk) == 44, "key spec fk at 44");
_Static_assert(sizeof(EmqCommandInfo) == 72, "command info must be 72 bytes");
_Static_assert(offsetof(EmqCommandInfo, arity) == 48, "command info arity at 48");
_Static_assert(offsetof(EmqCommandInfo, key_specs) == 56, "command info key_specs at 56");

/* Version 1 of the command-info ABI. A history entry is two string
 * pointers; the argument size is that of the 7.0 argument struct and is
 * never used because no arguments are passed. */
#define EMQ_COMMAND_INFO_VERSION {1, 2 * sizeof(const char *), sizeof(EmqKeySpec), 64}

/* The functions used, resolved at load. */
static void (*EMQ_SetModuleAttribs)(EmqCtx *ctx, const char *name, int ver, int apiver);
static int (*EMQ_CreateCommand)(EmqCtx *ctx, const char *name, EmqCmdFunc f,
                                const char *flags, int firstkey, int lastkey, int keystep);
static EmqCommand *(*EMQ_GetCommand)(EmqCtx *ctx, const char *name);
static int (*EMQ_SetCommandInfo)(EmqCommand *cmd, const EmqCommandInfo *info);
static int (*EMQ_ReplyWithError)(EmqCtx *ctx, const char *err);
static int (*EMQ_ReplyWithLongLong)(EmqCtx *ctx, long long ll);
static int (*EMQ_ReplyWithArray)(EmqCtx *ctx, long len);
static int (*EMQ_ReplyWithStringBuffer)(EmqCtx *ctx, const char *buf, size_t len);
static int (*EMQ_ReplyWithNull)(EmqCtx *ctx);
static const char *(*EMQ_StringPtrLen)(const EmqString *s, size_t *len);
static int (*EMQ_StringToLongLong)(const EmqString *s, long long *ll);
static EmqCallReply *(*EMQ_Call)(EmqCtx *ctx, const char *cmd, const char *fmt, ...);
static void (*EMQ_FreeCallReply)(EmqCallReply *r);
static int (*EMQ_CallReplyType)(EmqCallReply *r);
static long long (*EMQ_CallReplyInteger)(EmqCallReply *r);
static size_t (*EMQ_CallReplyLength)(EmqCallReply *r);
static EmqCallReply *(*EMQ_CallReplyArrayElement)(EmqCallReply *r, size_t idx);
static const char *(*EMQ_CallReplyStringPtr)(EmqCallReply *r, size_t *len);
static long long (*EMQ_Milliseconds)(void);
static long long (*EMQ_CachedMicroseconds)(void); /* optional: absent on Redis 7.0 */
static EmqServerInfo *(*EMQ_GetServerInfo)(EmqCtx *ctx, const char *section);
static const char *(*EMQ_ServerInfoGetFieldC)(EmqServerInfo *info, const char *field);
static void (*EMQ_FreeServerInfo)(EmqCtx *ctx, EmqServerInfo *info);
static void *(*EMQ_Alloc)(size_t n);
static void (*EMQ_Free)(void *p);

typedef int (*EmqGetApi)(const char *name, void *out);

/* emq_api_init resolves every function through the lookup pointer in the
 * first word of ctx. It returns EMQ_ERR when a required one is missing;
 * EMQ_CachedMicroseconds stays NULL when the server lacks it. */
static int emq_api_init(EmqCtx *ctx) {
    EmqGetApi getapi;
    memcpy(&getapi, (void *)ctx, sizeof getapi);
    int missing = 0;
#define EMQ_NEED(name) missing |= getapi("RedisModule_" #name, (void *)&EMQ_##name) != 0
    EMQ_NEED(SetModuleAttribs);
    EMQ_NEED(CreateCommand);
    EMQ_NEED(GetCommand);
    EMQ_NEED(SetCommandInfo);
    EMQ_NEED(ReplyWithError);
    EMQ_NEED(ReplyWithLongLong);
    EMQ_NEED(ReplyWithArray);
    EMQ_NEED(ReplyWithStringBuffer);
    EMQ_NEED(ReplyWithNull);
    EMQ_NEED(StringPtrLen);
    EMQ_NEED(StringToLongLong);
    EMQ_NEED(Call);
    EMQ_NEED(FreeCallReply);
    EMQ_NEED(CallReplyType);
    EMQ_NEED(CallReplyInteger);
    EMQ_NEED(CallReplyLength);
    EMQ_NEED(CallReplyArrayElement);
    EMQ_NEED(CallReplyStringPtr);
    EMQ_NEED(Milliseconds);
    EMQ_NEED(GetServerInfo);
    EMQ_NEED(ServerInfoGetFieldC);
    EMQ_NEED(FreeServerInfo);
    EMQ_NEED(Alloc);
    EMQ_NEED(Free);
#undef EMQ_NEED
    /* The cached clock is optional and chosen here, at load, not at build
     * time: one emq.so serves Redis 7.0 (no cached clock: now is the live
     * clock) and Valkey / Redis 7.2+ (now is the command's cached time, the
     * value TIME reports, shared by a whole MULTI/EXEC or script). Valkey
     * exports its API under both prefixes; its own name is tried second so
     * a future Valkey that drops the Redis alias still gives the cached
     * clock. The test build EMQ_LIVE_CLOCK skips the lookup, so the tests
     * can show that the clock check tells the two apart on every server. */
    EMQ_CachedMicroseconds = NULL;
#ifndef EMQ_LIVE_CLOCK
    if (getapi("RedisModule_CachedMicroseconds", (void *)&EMQ_CachedMicroseconds) != 0 &&
        getapi("ValkeyModule_CachedMicroseconds", (void *)&EMQ_CachedMicroseconds) != 0)
        EMQ_CachedMicroseconds = NULL;
#endif
    return missing ? EMQ_ERR : EMQ_OK;
}

#endif /* EMQ_H */
