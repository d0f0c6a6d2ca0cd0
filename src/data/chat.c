/* chat.c — chat JSON Lines -> serialized conversations -> template-rendered ids and loss masks
 * (contract in chat.h, rules in docs/finetune.md).
 *
 * Contents: 1. templates by name  2. parsing a JSON line  3. special tokens  4. rendering. */
#include "data/chat.h"

#include "data/jsonline.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== 1. templates by name */

int chat_template_parse(const char *name, ChatTemplate *out) {
    if (!strcmp(name, "auto")) *out = CHAT_TEMPLATE_AUTO;
    else if (!strcmp(name, "plain")) *out = CHAT_TEMPLATE_PLAIN;
    else if (!strcmp(name, "llama3")) *out = CHAT_TEMPLATE_LLAMA3;
    else return -1;
    return 0;
}

const char *chat_template_name(ChatTemplate t) {
    return t == CHAT_TEMPLATE_PLAIN ? "plain" : t == CHAT_TEMPLATE_LLAMA3 ? "llama3" : "auto";
}

/* ================================================================== 2. parsing */

static int grow(uint8_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    uint8_t *q = realloc(*p, nc);
    if (!q) return -1;
    *p = q, *cap = nc;
    return 0;
}

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Appends role byte, stripped content, NUL. Returns the stripped length, or -1 (out of memory). */
static long put_message(uint8_t **out, size_t *len, size_t *cap, char role, const char *content) {
    size_t a = 0, b = strlen(content);
    while (a < b && is_space((unsigned char)content[a])) a++;
    while (b > a && is_space((unsigned char)content[b - 1])) b--;
    if (grow(out, cap, *len + (b - a) + 2)) return -1;
    (*out)[(*len)++] = (uint8_t)role;
    memcpy(*out + *len, content + a, b - a);
    *len += b - a;
    (*out)[(*len)++] = 0;
    return (long)(b - a);
}

int chat_parse(const char *line, size_t n, uint8_t **out, size_t *len, size_t *cap, char *found, size_t found_cap) {
    *len = 0;
    size_t extra;
    cJSON *o = jsonline_parse(line, n, &extra);
    const char *dup = jsonline_duplicate_key(o);
    if (!o || !cJSON_IsObject(o) || dup) {
        if (dup)
            snprintf(found, found_cap, "the key \"%.60s\" given twice in one object (which one is meant?)", dup);
        else if (extra != SIZE_MAX)
            snprintf(found, found_cap, "more text after the object at byte %zu of the line (one object per line)",
                     extra + 1);
        else
            snprintf(found, found_cap, "%s", !o ? "invalid JSON" : "a JSON non-object");
        cJSON_Delete(o);
        return CHAT_BAD_JSON;
    }
    int rc = CHAT_OK, assistants = 0;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(o, "system");
    if (msgs && (prompt || resp || sys)) { /* two schemas: one would be dropped without a word */
        snprintf(found, found_cap, "\"messages\" beside \"%s\" (one schema per line: a system turn goes in messages)",
                 prompt ? "prompt" : resp ? "response" : "system");
        rc = CHAT_BAD_CHAT;
    } else if (cJSON_IsArray(msgs)) {
        int i = 0;
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
            i++;
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !cJSON_IsString(content)) {
                snprintf(found, found_cap, "message %d without a string \"role\" and \"content\"", i);
                rc = CHAT_BAD_CHAT;
                break;
            }
            /* \u0000 would end the string early (cJSON's C string) and end the message in the
             * serialization: refused rather than cut */
            if (jsonline_has_nul(line, n, o, role) || jsonline_has_nul(line, n, o, content)) {
                snprintf(found, found_cap, "message %d with a NUL character (\\u0000) in its %s", i,
                         jsonline_has_nul(line, n, o, role) ? "role" : "content");
                rc = CHAT_BAD_CHAT;
                break;
            }
            const char *r = role->valuestring;
            char code = !strcmp(r, "system") ? 's' : !strcmp(r, "user") ? 'u' : !strcmp(r, "assistant") ? 'a' : 0;
            if (!code) {
                snprintf(found, found_cap, "message %d with role \"%.40s\" (expected system, user or assistant)", i, r);
                rc = CHAT_BAD_CHAT;
                break;
            }
            long cl = put_message(out, len, cap, code, content->valuestring);
            if (cl < 0) {
                rc = -1;
                break;
            }
            if (code == 'a' && cl == 0) {
                snprintf(found, found_cap, "message %d: an assistant message with empty content", i);
                rc = CHAT_BAD_CHAT;
                break;
            }
            assistants += code == 'a';
        }
    } else if (cJSON_IsString(prompt) && cJSON_IsString(resp)) {
        if (sys && !cJSON_IsString(sys)) {
            snprintf(found, found_cap, "a non-string \"system\"");
            rc = CHAT_BAD_CHAT;
        }
        const cJSON *with_nul = jsonline_has_nul(line, n, o, prompt) ? prompt
                              : jsonline_has_nul(line, n, o, resp) ? resp
                              : sys && jsonline_has_nul(line, n, o, sys) ? sys : NULL;
        if (rc == CHAT_OK && with_nul) { /* as for a message's content above */
            snprintf(found, found_cap, "a NUL character (\\u0000) in \"%s\"", with_nul->string);
            rc = CHAT_BAD_CHAT;
        }
        long cl = 0;
        if (rc == CHAT_OK && sys && put_message(out, len, cap, 's', sys->valuestring) < 0) rc = -1;
        if (rc == CHAT_OK && put_message(out, len, cap, 'u', prompt->valuestring) < 0) rc = -1;
        if (rc == CHAT_OK && (cl = put_message(out, len, cap, 'a', resp->valuestring)) < 0) rc = -1;
        if (rc == CHAT_OK && cl == 0) {
            snprintf(found, found_cap, "an empty \"response\"");
            rc = CHAT_BAD_CHAT;
        }
        assistants = 1;
    } else if (prompt || resp) { /* half a pair, or one of another type: say which */
        const cJSON *bad = !cJSON_IsString(prompt) ? prompt : resp;
        const char *which = bad == prompt ? "prompt" : "response";
        snprintf(found, found_cap, bad ? "a non-string \"%s\"" : "\"%s\" without \"%s\"", bad ? which : prompt ? "prompt" : "response",
                 prompt ? "response" : "prompt");
        rc = CHAT_NO_SCHEMA; /* counted with the lines of no schema under --skip-bad, as before */
    } else {
        snprintf(found, found_cap, "%s", msgs ? "a non-array \"messages\"" : "neither \"messages\" nor \"prompt\" and \"response\"");
        rc = msgs ? CHAT_BAD_CHAT : CHAT_NO_SCHEMA;
    }
    if (rc == CHAT_OK && assistants == 0) {
        snprintf(found, found_cap, "a conversation without an assistant message (nothing to train)");
        rc = CHAT_BAD_CHAT;
    }
    cJSON_Delete(o);
    return rc;
}

/* ================================================================== 3. special tokens */

/* The id of special token `text` of tok, or -1 (ordinary tokens with the same bytes are not found). */
static long special_id(const Tokenizer *tok, const char *text) {
    uint32_t id;
    return tokenizer_special_id(tok, text, &id) == 0 ? (long)id : -1;
}

Status chat_format_init(ChatFormat *f, ChatTemplate t, const Tokenizer *tok, Err *err) {
    memset(f, 0, sizeof *f);
    if (t == CHAT_TEMPLATE_AUTO) t = !strcmp(tokenizer_kind(tok), "llama3") ? CHAT_TEMPLATE_LLAMA3 : CHAT_TEMPLATE_PLAIN;
    f->t = t;
    if (t != CHAT_TEMPLATE_LLAMA3) return ST_OK;
    const char *names[4] = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    uint32_t *dst[4] = {&f->begin_of_text, &f->start_header, &f->end_header, &f->eot_id};
    for (int i = 0; i < 4; i++) {
        long id = special_id(tok, names[i]);
        if (id < 0)
            return err_set(err, ST_ERR_INPUT,
                           "--chat-template llama3: expected a tokenizer with the special token %s (the Llama 3 "
                           "tokenizer), found the %s tokenizer without it", names[i], tokenizer_kind(tok));
        *dst[i] = (uint32_t)id;
    }
    return ST_OK;
}

/* ================================================================== 4. rendering */

/* The renderer's state: the text since the last special token, with a trained flag per byte. */
typedef struct {
    const Tokenizer *tok;
    uint8_t *text, *flag;
    size_t len, cap, fcap;
    uint32_t **ids;
    size_t *nids, *cap_ids;
    uint8_t **mask;
    size_t *mcap;
} Render;

static Status r_text(Render *r, const void *p, size_t n, int trained, Err *err) {
    if (grow(&r->text, &r->cap, r->len + n) || grow(&r->flag, &r->fcap, r->len + n))
        return err_set(err, ST_ERR_RUNTIME, "out of memory rendering a conversation");
    memcpy(r->text + r->len, p, n);
    memset(r->flag + r->len, trained, n);
    r->len += n;
    return ST_OK;
}

static Status r_mask_reserve(Render *r, size_t n, Err *err) {
    if (grow(r->mask, r->mcap, n)) return err_set(err, ST_ERR_RUNTIME, "out of memory rendering a conversation");
    return ST_OK;
}

/* Encodes the pending text as one string; each token is trained when its first byte is. */
static Status r_flush(Render *r, Err *err) {
    if (r->len == 0) return ST_OK;
    size_t first = *r->nids;
    Status st = tokenizer_encode(r->tok, r->text, r->len, r->ids, r->nids, r->cap_ids, err);
    if (st == ST_OK) st = r_mask_reserve(r, *r->nids, err);
    size_t off = 0;
    for (size_t i = first; i < *r->nids && st == ST_OK; i++) {
        size_t tl = 0;
        if (!tokenizer_token_bytes(r->tok, (*r->ids)[i], &tl) || tl == 0)
            return err_set(err, ST_ERR_RUNTIME, "chat: token %u has no bytes", (*r->ids)[i]);
        ST_CHECK(off < r->len);
        (*r->mask)[i] = r->flag[off];
        off += tl;
    }
    if (st == ST_OK) ST_CHECK(off == r->len); /* encode and decode are exact inverses */
    r->len = 0;
    return st;
}

static Status r_special(Render *r, uint32_t id, int trained, Err *err) {
    Status st = r_flush(r, err);
    if (st) return st;
    if (*r->nids + 1 > *r->cap_ids) {
        size_t nc = *r->cap_ids ? 2 * *r->cap_ids : 256;
        uint32_t *q = realloc(*r->ids, nc * sizeof *q);
        if (!q) return err_set(err, ST_ERR_RUNTIME, "out of memory rendering a conversation");
        *r->ids = q, *r->cap_ids = nc;
    }
    if ((st = r_mask_reserve(r, *r->nids + 1, err)) != ST_OK) return st;
    (*r->mask)[*r->nids] = (uint8_t)trained;
    (*r->ids)[(*r->nids)++] = id;
    return ST_OK;
}

Status chat_render(const ChatFormat *f, const Tokenizer *tok, const uint8_t *doc, size_t n, int prompt_only,
                   uint32_t **ids, size_t *nids, size_t *cap, uint8_t **mask, size_t *mcap, int *eot_trained, Err *err) {
    Render r = {tok, NULL, NULL, 0, 0, 0, ids, nids, cap, mask, mcap};
    Status st = ST_OK;
    int llama = f->t == CHAT_TEMPLATE_LLAMA3;
    /* the last assistant message: where a prompt_only rendering stops */
    size_t last_a = SIZE_MAX;
    for (size_t p = 0; p < n;) {
        const uint8_t *z = memchr(doc + p, 0, n - p);
        if (!z) return err_set(err, ST_ERR_INPUT, "chat: a serialized conversation without its final NUL");
        if (doc[p] == 'a') last_a = p;
        p = (size_t)(z - doc) + 1;
    }
    *eot_trained = 0;
    if (llama) st = r_special(&r, f->begin_of_text, 0, err);
    int first = 1;
    for (size_t p = 0; p < n && st == ST_OK;) {
        char role = (char)doc[p];
        const uint8_t *c = doc + p + 1, *z = memchr(c, 0, n - p - 1);
        size_t cl = (size_t)(z - c);
        size_t next = (size_t)(z - doc) + 1;
        int a = role == 'a', stop = prompt_only && p == last_a;
        const char *name = role == 's' ? "system" : role == 'u' ? "user" : role == 'a' ? "assistant" : NULL;
        if (!name) {
            st = err_set(err, ST_ERR_INPUT, "chat: unknown role byte 0x%02x in a serialized conversation", (unsigned)doc[p]);
            break;
        }
        if (llama) {
            if ((st = r_special(&r, f->start_header, 0, err)) != ST_OK) break;
            if ((st = r_text(&r, name, strlen(name), 0, err)) != ST_OK) break;
            if ((st = r_special(&r, f->end_header, 0, err)) != ST_OK) break;
            if ((st = r_text(&r, "\n\n", 2, 0, err)) != ST_OK) break;
            if (stop) break;
            if ((st = r_text(&r, c, cl, a, err)) != ST_OK) break;
            if ((st = r_special(&r, f->eot_id, a, err)) != ST_OK) break;
        } else {
            const char *label = role == 's' ? "System:" : role == 'u' ? "User:" : "Assistant:";
            if (!first && (st = r_text(&r, "\n\n", 2, 0, err)) != ST_OK) break;
            if ((st = r_text(&r, label, strlen(label), 0, err)) != ST_OK) break;
            if (stop) break;
            if ((st = r_text(&r, " ", 1, a, err)) != ST_OK) break;
            if ((st = r_text(&r, c, cl, a, err)) != ST_OK) break;
            if (a && next < n) { /* the turn ends with the "\n\n" before the next message: trained */
                if ((st = r_text(&r, "\n\n", 2, 1, err)) != ST_OK) break;
                first = 1; /* that separator is written: the next message starts without one */
                p = next;
                continue;
            }
            *eot_trained = a && next >= n;
        }
        first = 0;
        p = next;
    }
    if (st == ST_OK) st = r_flush(&r, err);
    if (prompt_only) *eot_trained = 0;
    free(r.text);
    free(r.flag);
    return st;
}

int chat_last_answer(const uint8_t *doc, size_t n, const uint8_t **p, size_t *len) {
    int found = -1;
    for (size_t i = 0; i < n;) {
        const uint8_t *z = memchr(doc + i, 0, n - i);
        if (!z) break;
        if (doc[i] == 'a') *p = doc + i + 1, *len = (size_t)(z - doc) - i - 1, found = 0;
        i = (size_t)(z - doc) + 1;
    }
    return found;
}

uint32_t chat_stop_id(const ChatFormat *f, const Tokenizer *tok) {
    return f->t == CHAT_TEMPLATE_LLAMA3 ? f->eot_id : tokenizer_eot(tok);
}
