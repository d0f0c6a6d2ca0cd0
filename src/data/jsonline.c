/* jsonline.c — a JSON line parsed whole, and NUL characters in its strings (contract in jsonline.h). */
#include "data/jsonline.h"

#include <stdint.h>
#include <string.h>

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

cJSON *jsonline_parse(const char *line, size_t n, size_t *extra_at) {
    if (extra_at) *extra_at = SIZE_MAX;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(line, n, &end, 0);
    if (!v) return NULL;
    size_t e = skip_ws(line, n, (size_t)(end - line));
    if (e < n) { /* a second value or other text after the first: the line is not one record */
        if (extra_at) *extra_at = e;
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* The raw string whose opening quote is s[*i]: moves *i past its closing quote; 1 when it holds a
 * \u0000 escape. An escape is a backslash and the byte after it, skipped together, so the second
 * backslash of \\ never starts an escape and \" never ends the string. */
static int scan_string(const char *s, size_t n, size_t *i) {
    size_t k = *i + 1;
    int nul = 0;
    while (k < n && s[k] != '"') {
        if (s[k] == '\\') {
            if (k + 5 < n && s[k + 1] == 'u' && !memcmp(s + k + 2, "0000", 4)) nul = 1;
            k += 2;
        } else {
            k++;
        }
    }
    *i = k + 1;
    return nul;
}

/* Walks the raw value at s[*i] beside its node v (cJSON keeps an object's members in order,
 * duplicates included, so the k-th raw member is the k-th child). Returns 1 when `target` is reached
 * (*nul: its string holds \u0000), 0 when the value ended without it, -1 if the text and the tree
 * disagree (not expected for a tree parsed from this text; then nothing is found). */
static int walk(const char *s, size_t n, size_t *i, const cJSON *v, const cJSON *target, int *nul) {
    *i = skip_ws(s, n, *i);
    if (*i >= n) return -1;
    char c = s[*i];
    if (c == '"') {
        int z = scan_string(s, n, i);
        if (v != target) return 0;
        *nul = z;
        return 1;
    }
    if (c == '{' || c == '[') {
        (*i)++;
        for (const cJSON *e = v->child; e; e = e->next) {
            if (c == '{') { /* the member's key, then ':' */
                *i = skip_ws(s, n, *i);
                if (*i >= n || s[*i] != '"') return -1;
                scan_string(s, n, i);
                *i = skip_ws(s, n, *i);
                if (*i >= n || s[*i] != ':') return -1;
                (*i)++;
            }
            int r = walk(s, n, i, e, target, nul);
            if (r) return r;
            *i = skip_ws(s, n, *i);
            if (*i < n && s[*i] == ',') (*i)++;
        }
        *i = skip_ws(s, n, *i) + 1; /* the closing bracket */
        return 0;
    }
    while (*i < n && !is_ws(s[*i]) && s[*i] != ',' && s[*i] != ']' && s[*i] != '}') (*i)++; /* number, literal */
    return 0;
}

int jsonline_has_nul(const char *line, size_t n, const cJSON *root, const cJSON *item) {
    int any = 0; /* the six bytes \u0000 anywhere: without them no string holds NUL (the usual case) */
    for (const char *p = line; !any && (p = memchr(p, '\\', (size_t)(line + n - p))); p++)
        any = line + n - p >= 6 && !memcmp(p, "\\u0000", 6);
    if (!any || !root || !item) return 0;
    size_t i = 0;
    int nul = 0;
    return walk(line, n, &i, root, item, &nul) == 1 && nul;
}

const char *jsonline_duplicate_key(const cJSON *v) {
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(v) && c->string)
            for (const cJSON *d = c->next; d; d = d->next)
                if (d->string && !strcmp(c->string, d->string)) return c->string;
        const char *k = jsonline_duplicate_key(c);
        if (k) return k;
    }
    return NULL;
}
