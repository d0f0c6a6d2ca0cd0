/* cmds_data.h — the data subcommands: `scaletrain tokenizer ...` and `scaletrain prepare ...`.
 *
 * Each takes the arguments after the subcommand name (argv[0] = the subcommand name), prints its
 * own one-line errors to stderr as "scaletrain <cmd>: <message>" and returns the exit code:
 * 0 ok, 1 runtime failure, 2 bad input or usage. `--help` lists every option with its default. */
#ifndef ST_CLI_CMDS_DATA_H
#define ST_CLI_CMDS_DATA_H

#include <stddef.h>

#include "data/bpe.h"
#include "data/prepare.h"

int cmd_tokenizer(int argc, char **argv);
int cmd_prepare(int argc, char **argv);

/* Finds OpenAI's GPT-2 files (encoder.json + vocab.bpe) when no --tokenizer-dir is given:
 * $ST_GPT2_DIR, then <dir of the executable>/../data/gpt2_tokenizer, <exe dir>/../../data/...,
 * <exe dir>/data/..., then ./data/gpt2_tokenizer. Writes the first that has encoder.json into buf
 * and returns buf, or NULL if none does. */
const char *cli_find_gpt2_dir(char *buf, size_t n);

/* The data directory of a named tokenizer (gpt2: as cli_find_gpt2_dir; cl100k / o200k: data/tokenizers
 * holding NAME_base.tkr, next to the executable or in ./data), or NULL (not found, or not a named one). */
const char *cli_find_tokenizer_dir(const char *spec, char *buf, size_t n);

/* Loads tokenizer spec (gpt2, cl100k, o200k, llama3, bytes, FILE or DIR) as train, sample and eval
 * do: a named one's files from dir (--tokenizer-dir; "" when not given) or the data directory found
 * next to the executable or in ./data. The error is tokenizer_load's (callers name their flag). */
Status cli_load_tokenizer(const char *spec, const char *dir, Tokenizer **out, Err *err);

/* A flag that applies only to inputs read as `fmt` (--field: JSON Lines; --separator: text), given
 * with o->inputs: 0 when at least one input is read as fmt (mixed inputs: it applies to those), else
 * the exit code (2, or 1 for a runtime failure) with the message for `scaletrain <cmd>: ` in msg,
 * e.g. "--field: would change nothing: no input is read as JSON Lines, found inputs read as text
 * (the format follows each file's name under --format auto); expected a .jsonl or .json input or
 * --format jsonl". Directories count by their files, "-" as text unless --format says otherwise. */
int cli_check_flag_format(const PrepareOptions *o, const char *flag, PrepareFormat fmt, char *msg, size_t cap);

/* Strict number parsing for flags: the whole string must be a number. 0 ok, -1 otherwise. */
int cli_parse_u64(const char *s, unsigned long long *out);
int cli_parse_double(const char *s, double *out);

#endif
