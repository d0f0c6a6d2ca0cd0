/* chat.h — conversations for supervised fine-tuning: the JSON Lines schemas `prepare --format chat`
 * reads, and the chat templates that render a conversation into token ids with a per-token loss
 * mask (docs/finetune.md has the rules and examples).
 *
 * Input, one JSON object per line, either
 *   {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}   or
 *   {"prompt": "...", "response": "..." [, "system": "..."]}   (= system?, user, assistant).
 * Content is stripped of leading and trailing ASCII whitespace (as Meta's reference ChatFormat does).
 * Refused (chat_parse's codes): a line that is not one JSON object (text after it included), an
 * object with neither schema, a message that is not an object of string role and content, an unknown
 * role, an assistant message whose content is empty, a string holding NUL (\u0000), a conversation
 * without an assistant message (no trained token).
 *
 * A parsed conversation travels through `prepare` as a *document* in a compact serialization: per
 * message one role byte ('s', 'u', 'a'), the content bytes (never NUL: a string holding JSON's
 * \u0000 is refused, as for --format jsonl), one NUL byte. Its XXH3-128 is the document key (split,
 * order, dedup).
 *
 * Templates (the mask marks *targets*: token i trained = predicting it from token i-1 is in the loss):
 *   llama3: <|begin_of_text|>, then per message <|start_header_id|>{role}<|end_header_id|>\n\n{content}
 *           <|eot_id|>; trained: an assistant message's content tokens and its <|eot_id|>. The EOT
 *           prepare appends after each document (<|end_of_text|>) is not trained.
 *   plain:  (any tokenizer) the messages as "System: {c}", "User: {c}", "Assistant: {c}" joined by
 *           "\n\n", then the EOT prepare appends; trained: an assistant message's " {content}" and the
 *           "\n\n" that ends its turn, or the EOT when it is the last message.
 * The text between two special tokens is encoded as one string (so a prompt rendered at inference as
 * the same text encodes to the same ids), and a token is trained when its first byte lies in a trained
 * part. Special tokens come only from the template: literal "<|eot_id|>" in content encodes as text. */
#ifndef ST_DATA_CHAT_H
#define ST_DATA_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "data/bpe.h"

typedef enum {
    CHAT_TEMPLATE_AUTO = 0, /* llama3 for the Llama 3 tokenizer, plain for every other */
    CHAT_TEMPLATE_PLAIN,
    CHAT_TEMPLATE_LLAMA3,
} ChatTemplate;

/* "auto" | "plain" | "llama3" -> 0 and *out; else -1. */
int chat_template_parse(const char *name, ChatTemplate *out);
const char *chat_template_name(ChatTemplate t);

/* chat_parse results */
enum {
    CHAT_OK = 0,
    CHAT_BAD_JSON,   /* not a JSON object */
    CHAT_NO_SCHEMA,  /* neither "messages" nor "prompt" + "response" */
    CHAT_BAD_CHAT,   /* a bad message, unknown role, empty assistant content, no assistant message */
};

/* Parses one JSON line into the serialization above, written to *out (growable: *len set, *cap its
 * capacity, realloc'ed as needed, owned by the caller). Returns a CHAT_ code; on failure `found`
 * (cap bytes) says what was found, e.g. "message 2 with role \"tool\"". -1: out of memory. */
int chat_parse(const char *line, size_t n, uint8_t **out, size_t *len, size_t *cap, char *found, size_t found_cap);

/* A template bound to a tokenizer: its special token ids (llama3). */
typedef struct {
    ChatTemplate t;
    uint32_t begin_of_text, start_header, end_header, eot_id;
} ChatFormat;

/* Resolves `t` (AUTO: by the tokenizer) for tok. Errors (ST_ERR_INPUT): llama3 with a tokenizer that
 * lacks its special tokens (the message names the missing token and the tokenizer's kind). */
Status chat_format_init(ChatFormat *f, ChatTemplate t, const Tokenizer *tok, Err *err);

/* Renders a serialized conversation: APPENDS its ids to *ids (growable, as tokenizer_encode) and one
 * byte per id (1 = trained target) to *mask (growable, *mcap its capacity; its length is *nids too);
 * *eot_trained = whether the EOT that follows the document is trained. With prompt_only the rendering
 * stops where the last assistant message's content would start (the generation prompt: the template
 * up to "Assistant:" or up to the assistant header and "\n\n"). Thread-safe. Errors: ST_ERR_RUNTIME
 * (out of memory), ST_ERR_INPUT (a malformed serialization). */
Status chat_render(const ChatFormat *f, const Tokenizer *tok, const uint8_t *doc, size_t n, int prompt_only,
                   uint32_t **ids, size_t *nids, size_t *cap, uint8_t **mask, size_t *mcap, int *eot_trained, Err *err);

/* The content of the last assistant message of a serialized conversation (*p into doc, *len bytes),
 * 0; -1 when there is none. What `eval --exact-match` compares a generated answer with. */
int chat_last_answer(const uint8_t *doc, size_t n, const uint8_t **p, size_t *len);

/* The token that ends an assistant turn in generation: <|eot_id|> for llama3, the EOT for plain. */
uint32_t chat_stop_id(const ChatFormat *f, const Tokenizer *tok);

#endif
