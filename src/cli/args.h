/* args.h — table-driven option parsing shared by the subcommands.
 *
 * Every option has a --long-name, a type, a destination, a default shown by --help and a help
 * line. `--name value` and `--name=value` are accepted; `--config FILE.json` loads a JSON object
 * whose keys are option names without the leading dashes ("max-seq-len"; "max_seq_len" too) before
 * the command line, which overrides it.
 * Errors are one line naming the flag, what was expected and what was found (ST_ERR_INPUT). */
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>

#include "core/status.h"

/* ARG_DIR: a string naming a directory, stored without trailing slashes ("run/" is "run"), so the
 * paths built on it print as "run/model.safetensors", not "run//model.safetensors"; "/" stays. */
typedef enum { ARG_INT, ARG_LONG, ARG_FLOAT, ARG_DOUBLE, ARG_U64, ARG_STR, ARG_FLAG, ARG_DIR } ArgType;

typedef struct {
    const char *name; /* without the leading dashes */
    ArgType type;
    void *dst;        /* int*, long*, float*, double*, uint64_t*, char[len], int* (flag) */
    size_t len;       /* ARG_STR buffer size */
    const char *help;
    int seen;         /* set when given (command line or config file) */
} ArgSpec;

/* Parses argv[0..argc) (argv[0] is the first option, not the program). Positional arguments are
 * collected into pos (up to maxpos). --help sets *help. */
Status args_parse(ArgSpec *specs, int n, int argc, char **argv, char **pos, int maxpos, int *npos, int *help,
                  Err *err);

/* Prints "  --name VALUE  help (default: current value)" for each spec. */
void args_print_help(const ArgSpec *specs, int n);

/* path without its trailing slashes ("run/" -> "run"; "/" stays): ARG_DIR's rule, for the
 * positional weights argument of eval, sample and export too. */
void args_trim_dir(char *path);

/* prefix, then each of argv as core/shellword.h's shell_word_append writes it: the recorded command
 * (a manifest's, a start record's) runs again as given. Truncated to cap. */
void args_join_quoted(char *out, size_t cap, const char *prefix, int argc, char **argv);

/* Returns the spec named name, or NULL. */
ArgSpec *args_find(ArgSpec *specs, int n, const char *name);

/* Directory of the running executable (for bundled data next to it), "" if unknown. */
void args_exe_dir(char *buf, size_t len);

/* First existing of: explicit (if non-empty), <exe>/../data/<sub>, <exe>/../../data/<sub>,
 * data/<sub>. Writes it to out; returns 0 if none exists (out then holds the explicit or
 * data/<sub> path for the error message). */
int args_find_data_dir(const char *explicit_dir, const char *sub, char *out, size_t len);

#endif
