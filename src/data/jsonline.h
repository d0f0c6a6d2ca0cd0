/* jsonline.h — two checks cJSON does not make for one line of JSON Lines (shared by the JSON Lines
 * and chat readers, docsource.c and chat.c).
 *
 * 1. cJSON_ParseWithLength stops after the first value and ignores what follows it, so
 *    `{"text":"a"}{"text":"b"}` or `{"text":"a"} junk` read as one object and the rest vanished:
 *    jsonline_parse requires the whole line to be one value (white space may follow it).
 * 2. cJSON decodes a string into a C string, so JSON's `\u0000` escape ends the string there and
 *    the text after it vanished: jsonline_has_nul finds the escape in the raw text of one string.
 * 3. cJSON keeps every member of an object and its lookups return the first of a name, where
 *    Python's json (and most writers' readers) keep the last: `{"text":"a","text":"b"}` trained on
 *    "a" here and "b" there. jsonline_duplicate_key finds such a name, and the line is refused. */
#ifndef ST_DATA_JSONLINE_H
#define ST_DATA_JSONLINE_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* line[0, n) parsed as one JSON value followed by nothing but white space (space, tab, CR, LF);
 * NULL when it is not valid JSON or anything else follows the value, and then *extra_at (may be
 * NULL) is the offset in the line of the first byte after a complete value, or SIZE_MAX when the
 * line is not valid JSON at all. Free the tree with cJSON_Delete. */
cJSON *jsonline_parse(const char *line, size_t n, size_t *extra_at);

/* 1 when the string `item`, a node of the tree `root` that jsonline_parse made of line[0, n), holds
 * a NUL character (a `\u0000` escape in its raw text; `\\u0000` is a backslash and "u0000", not a
 * NUL); 0 otherwise. Reads the line only when it contains the six bytes `\u0000` somewhere. */
int jsonline_has_nul(const char *line, size_t n, const cJSON *root, const cJSON *item);

/* The first member name given twice in one object anywhere in the tree (NULL: none). */
const char *jsonline_duplicate_key(const cJSON *root);

#endif
