/* args.c — option parsing (see args.h). */
#include "cli/args.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/shellword.h"

ArgSpec *args_find(ArgSpec *specs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(specs[i].name, name)) return &specs[i];
    return NULL;
}

static Status set_value(ArgSpec *s, const char *v, Err *err) {
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case ARG_INT:
    case ARG_LONG: {
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno)
            return err_set(err, ST_ERR_INPUT, "--%s: expected an integer, found '%s'", s->name, v);
        if (s->type == ARG_INT) {
            if (x < INT_MIN || x > INT_MAX)
                return err_set(err, ST_ERR_INPUT, "--%s: expected an integer in int range, found '%s'", s->name, v);
            *(int *)s->dst = (int)x;
        } else {
            *(long *)s->dst = (long)x;
        }
        break;
    }
    case ARG_U64: {
        /* Decimal digits only: base 0 read "010" as 8 (octal), took hex and refused "08"; strtoull
         * alone also skips spaces and takes a sign. */
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || strspn(v, "0123456789") != strlen(v) || *end || errno)
            return err_set(err, ST_ERR_INPUT, "--%s: expected a non-negative decimal integer below 2^64, found '%s'",
                           s->name, v);
        *(uint64_t *)s->dst = x;
        break;
    }
    case ARG_FLOAT:
    case ARG_DOUBLE: {
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return err_set(err, ST_ERR_INPUT, "--%s: expected a number, found '%s'", s->name, v);
        /* a float flag's value past FLT_MAX became inf (--lr 1e39 trained with lr inf) */
        if (s->type == ARG_FLOAT && !isfinite((float)x))
            return err_set(err, ST_ERR_INPUT, "--%s: expected a number within single precision (|x| <= 3.4e38), "
                           "found '%s'", s->name, v);
        if (s->type == ARG_FLOAT) *(float *)s->dst = (float)x;
        else *(double *)s->dst = x;
        break;
    }
    case ARG_STR:
    case ARG_DIR:
        if (strlen(v) >= s->len)
            return err_set(err, ST_ERR_INPUT, "--%s: expected at most %zu characters, found %zu", s->name, s->len - 1,
                           strlen(v));
        snprintf((char *)s->dst, s->len, "%s", v);
        if (s->type == ARG_DIR) args_trim_dir((char *)s->dst);
        break;
    case ARG_FLAG:
        if (!strcmp(v, "1") || !strcmp(v, "true")) *(int *)s->dst = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false")) *(int *)s->dst = 0;
        else return err_set(err, ST_ERR_INPUT, "--%s: expected true or false, found '%s'", s->name, v);
        break;
    }
    s->seen = 1;
    return ST_OK;
}

static Status load_config(ArgSpec *specs, int n, const char *path, Err *err) {
    char *text;
    size_t len;
    Status st = file_read_all(path, &text, &len, err);
    if (st != ST_OK) return err_prefix(err, "--config");
    /* the whole file: cJSON_Parse stops after the object and took '{"steps": 2} trailing' */
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, ST_ERR_INPUT, "--config %s: expected a JSON object of options, found %s", path,
                       j ? "another JSON value" : "invalid JSON (or text after the object)");
    }
    for (cJSON *it = j->child; it && st == ST_OK; it = it->next) {
        /* Keys are option names, hyphenated as on the command line ("max-seq-len"); the underscore
         * spelling of JSON and Python ("max_seq_len") names the same option. */
        char key[128];
        snprintf(key, sizeof key, "%s", it->string);
        for (char *q = key; *q; q++)
            if (*q == '_') *q = '-';
        ArgSpec *s = args_find(specs, n, key);
        if (!s) {
            st = err_set(err, ST_ERR_INPUT, "--config %s: unknown option '%s' (keys are the option names without "
                         "the dashes, e.g. \"max-seq-len\" or \"max_seq_len\"; see --help)", path, it->string);
            break;
        }
        for (cJSON *prev = j->child; prev != it; prev = prev->next) { /* both spellings in one file */
            char pk[128];
            snprintf(pk, sizeof pk, "%s", prev->string);
            for (char *q = pk; *q; q++)
                if (*q == '_') *q = '-';
            if (!strcmp(pk, key)) {
                st = err_set(err, ST_ERR_INPUT, "--config %s: option '%s' given twice (\"%s\" and \"%s\")", path, key,
                             prev->string, it->string);
                break;
            }
        }
        if (st != ST_OK) break;
        char buf[1100];
        if (cJSON_IsString(it)) snprintf(buf, sizeof buf, "%s", it->valuestring);
        else if (cJSON_IsBool(it)) snprintf(buf, sizeof buf, "%s", cJSON_IsTrue(it) ? "true" : "false");
        else if (cJSON_IsNumber(it)) snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
        else {
            st = err_set(err, ST_ERR_INPUT, "--config %s: option '%s': expected a string, number or boolean", path,
                         it->string);
            break;
        }
        /* a JSON number is a double: an integer above 2^53 arrives rounded (another seed, silently) */
        if (s->type == ARG_U64 && cJSON_IsNumber(it) && fabs(it->valuedouble) > 9007199254740992.0) {
            st = err_set(err, ST_ERR_INPUT, "--config %s: option '%s': expected an integer up to 2^53 as a JSON number, "
                         "found %.17g (rounded by JSON); write it as a string, \"%s\": \"DIGITS\"", path, it->string,
                         it->valuedouble, it->string);
            break;
        }
        /* a flag takes true/false, or exactly 1/0 (as on the command line): 0.5 used to mean false */
        if (s->type == ARG_FLAG && cJSON_IsNumber(it)) {
            if (it->valuedouble != 0 && it->valuedouble != 1) {
                st = err_set(err, ST_ERR_INPUT, "--config %s: option '%s': expected true or false (or 1 or 0), found %.17g",
                             path, it->string, it->valuedouble);
                break;
            }
            snprintf(buf, sizeof buf, "%d", it->valuedouble == 1);
        }
        st = set_value(s, buf, err);
        if (st != ST_OK) err_prefix(err, "--config %s", path);
    }
    cJSON_Delete(j);
    return st;
}

Status args_parse(ArgSpec *specs, int n, int argc, char **argv, char **pos, int maxpos, int *npos, int *help,
                  Err *err) {
    *npos = 0;
    *help = 0;
    /* The config file first, so the command line overrides it. One file: a second one's keys
     * overrode the first's silently, as a flag given twice did. */
    const char *config = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *path = NULL;
        if (!strncmp(a, "--config=", 9)) path = a + 9;
        else if (!strcmp(a, "--config")) {
            if (i + 1 >= argc) return err_set(err, ST_ERR_INPUT, "--config: expected a JSON file, found nothing");
            path = argv[++i];
        }
        if (!path) continue;
        if (config) return err_set(err, ST_ERR_INPUT, "--config: given twice (%s, then %s)", config, path);
        config = path;
        Status st = load_config(specs, n, path, err);
        if (st != ST_OK) return st;
    }
    /* The value each option took on the command line (NULL: not given there): an option given
     * twice is refused, as a key given twice in --config is (the last value used to win silently:
     * `--steps 3 --steps 5` ran 5 steps). No option accumulates. */
    const char **given = calloc((size_t)(n > 0 ? n : 1), sizeof *given);
    if (!given) return err_set(err, ST_ERR_RUNTIME, "out of memory");
    Status st = ST_OK;
    for (int i = 0; i < argc && st == ST_OK; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (*npos >= maxpos) {
                st = err_set(err, ST_ERR_INPUT, "unexpected argument '%s' (expected at most %d positional argument%s)", a,
                             maxpos, maxpos == 1 ? "" : "s");
                break;
            }
            pos[(*npos)++] = argv[i];
            continue;
        }
        char name[128];
        const char *eq = strchr(a + 2, '='), *val = NULL;
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, a + 2, nl);
        name[nl] = '\0';
        if (!strcmp(name, "config")) {
            if (!eq) i++;
            continue;
        }
        ArgSpec *s = args_find(specs, n, name);
        if (!s) {
            st = err_set(err, ST_ERR_INPUT, "unknown option --%s (see --help)", name);
            break;
        }
        if (eq) {
            val = eq + 1;
        } else if (s->type == ARG_FLAG) {
            val = "1";
        } else {
            if (i + 1 >= argc) {
                st = err_set(err, ST_ERR_INPUT, "--%s: expected a value, found nothing", name);
                break;
            }
            val = argv[++i];
        }
        const char **prev = &given[s - specs];
        if (*prev) {
            if (s->type == ARG_FLAG && !eq && !strcmp(*prev, "1"))
                st = err_set(err, ST_ERR_INPUT, "--%s: given twice; expected it once", name);
            else
                st = err_set(err, ST_ERR_INPUT, "--%s: given twice (%s%s%s, then %s%s%s); expected it once", name,
                             **prev ? "" : "'", *prev, **prev ? "" : "'", *val ? "" : "'", val, *val ? "" : "'");
            break;
        }
        *prev = val;
        st = set_value(s, val, err);
    }
    free(given);
    return st;
}

void args_print_help(const ArgSpec *specs, int n) {
    for (int i = 0; i < n; i++) {
        const ArgSpec *s = &specs[i];
        char def[1100];
        switch (s->type) {
        case ARG_INT: snprintf(def, sizeof def, "%d", *(int *)s->dst); break;
        case ARG_LONG: snprintf(def, sizeof def, "%ld", *(long *)s->dst); break;
        case ARG_U64: snprintf(def, sizeof def, "%" PRIu64, *(uint64_t *)s->dst); break;
        case ARG_FLOAT: snprintf(def, sizeof def, "%g", *(float *)s->dst); break;
        case ARG_DOUBLE: snprintf(def, sizeof def, "%g", *(double *)s->dst); break;
        case ARG_STR:
        case ARG_DIR: snprintf(def, sizeof def, "%s", *(char *)s->dst ? (char *)s->dst : "none"); break;
        case ARG_FLAG: snprintf(def, sizeof def, "%s", *(int *)s->dst ? "on" : "off"); break;
        }
        /* Generated from the table, once: a help line that already explains its default ("default
         * 512", "(-1: 0.9)", "(0: the world size)") is not followed by the raw sentinel value. */
        char own[80];
        snprintf(own, sizeof own, "(%.64s:", def);
        if (strstr(s->help, "default") || strstr(s->help, own)) printf("  --%-16s %s\n", s->name, s->help);
        else printf("  --%-16s %s (default: %s)\n", s->name, s->help, def);
    }
    printf("  --%-16s %s\n", "config FILE",
           "JSON object of options, keyed by option name (\"max-seq-len\" or \"max_seq_len\"); the command line "
           "overrides it");
}

void args_exe_dir(char *buf, size_t len) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0 || len == 0) {
        if (len) buf[0] = '\0';
        return;
    }
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (slash) *slash = '\0';
    snprintf(buf, len, "%s", path);
}

int args_find_data_dir(const char *explicit_dir, const char *sub, char *out, size_t len) {
    struct stat sb;
    if (explicit_dir && explicit_dir[0]) {
        snprintf(out, len, "%s", explicit_dir);
        return stat(out, &sb) == 0;
    }
    char exe[4096];
    args_exe_dir(exe, sizeof exe);
    const char *fmts[] = {"%s/../data/%s", "%s/../../data/%s"};
    for (int i = 0; i < 2 && exe[0]; i++) {
        snprintf(out, len, fmts[i], exe, sub);
        if (stat(out, &sb) == 0) return 1;
    }
    snprintf(out, len, "data/%s", sub);
    return stat(out, &sb) == 0;
}

void args_join_quoted(char *out, size_t cap, const char *prefix, int argc, char **argv) {
    snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < argc; i++) shell_word_append(out, cap, argv[i]);
}

void args_trim_dir(char *path) {
    for (char *e = path + strlen(path); e > path + 1 && e[-1] == '/';) *--e = '\0';
}
