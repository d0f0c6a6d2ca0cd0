/* docsource.h — one input of `prepare`, read as a stream of documents in bounded memory.
 *
 * A DocReader opens a file (or standard input for "-"), undoes its compression (found by the
 * first bytes, not the name: gzip 1f 8b, zstd 28 b5 2f fd; anything else is read as is), and
 * splits the decoded bytes into documents, one at a time:
 *   - text: a line equal to the separator (optionally ending in \r) ends a document; the line end
 *     before the separator line (\n or \r\n) belongs to neither document; "" makes every blank line
 *     a boundary;
 *   - JSON Lines: one object per non-blank line, the document is its string field `field`;
 *   - WikiText (*.tokens): a top-level heading line " = Title = " starts an article;
 *   - line pieces (line_pieces = N > 0, text with separator "" only): an input whose text comes out
 *     as a single document is returned instead as consecutive pieces, each ending at a line end
 *     (its '\n' included): a piece ends at the first line end at least N bytes after its start,
 *     unless fewer than N bytes would follow, in which case it takes the rest. So every piece has
 *     at least N bytes (the whole text when it has fewer than 2N), and the pieces concatenated
 *     are the document. To know that no second document follows, the first document is held
 *     until the second one is found.
 *   - chat (only when forced): one conversation per non-blank JSON line, serialized (chat.h).
 * The format follows the name with any .gz / .zst removed (.jsonl / .json -> JSON Lines, .tokens
 * -> WikiText, else text) unless forced; standard input is text unless forced. A UTF-8 byte order
 * mark (EF BB BF) at the very start of the decoded input is dropped (one), in every format.
 * Memory: a 1 MiB read buffer, the longest line and the longest document (with line_pieces, the
 * first document too while the second is read).
 *
 * Bad input is an error (ST_ERR_INPUT) naming the file, what was expected and what was found,
 * with the line number and the byte offset in the decoded stream: binary data (a NUL byte; more
 * than a quarter of the first MiB control bytes or invalid UTF-8), a truncated or corrupt gzip /
 * zstd stream (with the compressed offset), a line that is not one JSON object (text after it
 * included), an object without the string field or with a NUL (\u0000) in it, a document that is
 * not valid UTF-8, a conversation chat_parse refuses. With skip_bad the last four are counted (a
 * NUL as a missing field) and skipped instead; with allow_invalid_utf8 invalid bytes are kept (they
 * encode as bytes). */
#ifndef ST_DATA_DOCSOURCE_H
#define ST_DATA_DOCSOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef enum {
    PREP_FORMAT_AUTO = 0, /* by extension */
    PREP_FORMAT_TEXT,
    PREP_FORMAT_JSONL,
    PREP_FORMAT_WIKITEXT,
    PREP_FORMAT_CHAT,     /* chat JSON Lines (chat.h): a document is one serialized conversation; never
                             chosen by extension */
} PrepareFormat;

typedef struct {
    PrepareFormat format;
    const char *separator;    /* text: the separator line ("" = blank line) */
    const char *field;        /* JSON Lines: the string field holding the text; NULL = "text" */
    int skip_bad;             /* count and skip bad JSON lines, missing fields, invalid UTF-8 */
    int allow_invalid_utf8;   /* keep documents with invalid UTF-8 (their bytes are encoded as is) */
    size_t line_pieces;       /* text with separator "": when the whole input is one document, cut it
                                 into pieces of at least this many bytes at line ends; 0 = never */
    int no_hints;             /* errors end at the finding, without prepare's ways out (--skip-bad,
                                 --allow-invalid-utf8): for a caller that has neither flag */
} DocReaderOptions;

typedef struct {
    uint64_t bad_json;        /* lines that are not a JSON object (skipped) */
    uint64_t missing_field;   /* objects without the string field (skipped) */
    uint64_t bad_utf8;        /* documents with invalid UTF-8 (skipped) */
    uint64_t bad_chat;        /* chat: bad messages, unknown roles, empty answers, nothing to train (skipped) */
} DocSkips;

typedef struct DocReader DocReader;

/* The format a file is read as: `format` unless AUTO, else by extension with .gz/.zst removed
 * (.jsonl/.json: JSON Lines, .tokens: WikiText, anything else and "-": text). */
PrepareFormat docsource_format_of(const char *path, PrepareFormat format);

/* Opens path ("-" = standard input). Errors: missing or unreadable file (ST_ERR_INPUT). */
Status docreader_open(DocReader **r, const char *path, const DocReaderOptions *o, Err *err);

/* The next non-empty document: *doc points into the reader and stays valid until the next call.
 * At the end of the input *doc = NULL, *n = 0 and ST_OK. Errors as in the file header. */
Status docreader_next(DocReader *r, const uint8_t **doc, size_t *n, Err *err);

uint64_t docreader_raw_bytes(const DocReader *r);   /* bytes read from the file so far */
uint64_t docreader_checksum(const DocReader *r);    /* XXH3-64 of those raw bytes */
const DocSkips *docreader_skips(const DocReader *r);
/* With line_pieces: how many pieces the input was cut into so far (1: the single document was
 * shorter than two pieces; 0: the input has several documents, or none, or the option is off). */
uint64_t docreader_line_pieces(const DocReader *r);
void docreader_close(DocReader *r);                 /* safe on NULL */

/* Offset of the first byte of p[0..n) that is not part of well-formed UTF-8, or SIZE_MAX. */
size_t utf8_first_invalid(const uint8_t *p, size_t n);

#endif
