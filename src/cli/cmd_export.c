/* cmd_export.c — `scaletrain export CKPT --format hf|llmc -o OUT`: a checkpoint's weights as a
 * Hugging Face GPT-2 folder (model.safetensors + config.json) or an llm.c fp32 .bin.
 *
 * CKPT is a checkpoint directory (verified against its checksums), a --ckpt-dir (its newest
 * valid checkpoint, falling back past corrupt ones with a note on stderr) or a plain weights
 * folder with model.safetensors + config.json (e.g. `train --out`). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_data.h"
#include "data/bpe.h"
#include "cli/cmds_ckpt.h"
#include "ckpt/lora_ckpt.h"
#include "core/fileio.h"
#include "core/half.h"
#include "model/lora.h"

/* A LoRA checkpoint (ckpt/lora_ckpt.h): --adapter writes PEFT's adapter folder, --merge the base with
 * W + (alpha/r)·B·A folded into every adapted weight as an ordinary Hugging Face folder (config
 * unchanged; a checkpoint trained on a bf16-stored base merges into the blocks' bf16 values). The base is the one state.json references (--init-from path or seed), or --base; its
 * XXH3 must equal the recorded one. */
/* --tokenizer given to an hf export: it must load and fit the model's vocabulary, or the folder's
 * config.json names a tokenizer that sample and train --init-from then refuse ("nope", or gpt2's
 * 50257 ids for a 257-id model, were written without a word). */
static Status check_tokenizer(const char *spec, int vocab, Err *err) {
    Tokenizer *tk = NULL;
    Status st = cli_load_tokenizer(spec, "", &tk, err);
    if (st != ST_OK) return err_prefix(err, "--tokenizer"), st;
    uint32_t tv = tokenizer_vocab_size(tk);
    tokenizer_free(tk);
    if (tv > (uint32_t)vocab)
        return err_set(err, ST_ERR_INPUT, "--tokenizer %s: has %u ids, the model's vocabulary %d: expected at most that "
                       "many (the tokenizer the weights were trained with)", spec, tv, vocab);
    return ST_OK;
}

static int export_lora(const char *path, int merge, const char *base, const char *out, const char *tokenizer, int bf16,
                       uint64_t shard) {
    LoraCkptMeta meta;
    LoraConfig lc;
    ModelConfig cfg;
    LoraLayout ll;
    Err err = {0};
    Status st = ckpt_lora_read_meta(path, &meta, &lc, &cfg, &err);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    if ((st = lora_layout_init(&ll, &cfg, &lc, 1, &err)) != ST_OK) {
        ckpt_lora_meta_free(&meta);
        return cli_fail("export", st, err.msg);
    }
    float *ad = malloc(ll.total * sizeof(float));
    if (!ad) {
        ckpt_lora_meta_free(&meta);
        return cli_fail("export", ST_ERR_RUNTIME, "out of memory");
    }
    st = ckpt_lora_load(path, &ll, ad, NULL, NULL, &err);
    const char *src = base[0] ? base : meta.init_from;
    /* --adapter records --base as PEFT's base_model_name_or_path: a Hub id is taken as given, but a
     * local path (one that exists, or starts with / or .) must be the base the run was trained on,
     * as --merge checks (any path was written unchecked) */
    int exists = base[0] && access(base, F_OK) == 0, local = exists || base[0] == '/' || base[0] == '.';
    if (st == ST_OK && !merge && local && !exists)
        st = err_set(&err, ST_ERR_INPUT, "--base %s: expected an existing weights folder or a Hugging Face model id, "
                     "found no such path", base);
    if (st == ST_OK && (merge || local)) { /* the base loaded and checked against the recorded hash */
        Gpt g = {0};
        st = gpt_init(&g, &cfg, NULL, NULL, &err);
        if (st == ST_OK) {
            gpt_init_params(&g, meta.base_seed);
            if (src[0] && !base[0] && src[0] != '/' && access(src, F_OK) != 0) /* the run's path, from its directory */
                st = err_set(&err, ST_ERR_INPUT, "%s: its base %s (the run's --init-from, relative to the directory it "
                             "ran in) is not found from here; expected --base PATH to the base's weights", path, src);
            else if (src[0] && (st = ckpt_init_from(&g.w, src, &err)) != ST_OK) err_prefix(&err, "--base");
        }
        uint64_t h = st == ST_OK ? XXH3_64bits(g.w.params, g.w.layout.total * sizeof(float)) : 0;
        if (st == ST_OK && h != meta.base_hash)
            st = err_set(&err, ST_ERR_INPUT, "--base %s: its weights (XXH3 %016llx) are not the base %s was trained on "
                         "(XXH3 %016llx)", src[0] ? src : "(random, from the recorded seed)", (unsigned long long)h, path,
                         (unsigned long long)meta.base_hash);
        if (st == ST_OK && merge && lc.base_bf16) { /* trained on the blocks' bf16 values (--lora-base-precision bf16) */
            const ParamLayout *pl = &g.w.layout;
            for (size_t i = pl->seg_off[1]; i < pl->seg_off[cfg.n_layer + 1]; i++) {
                uint32_t u = (uint32_t)half_bf16(g.w.params[i]) << 16;
                memcpy(&g.w.params[i], &u, sizeof u);
            }
        }
        if (st == ST_OK && merge && tokenizer[0]) st = check_tokenizer(tokenizer, cfg.vocab, &err);
        if (st == ST_OK && merge) {
            lora_merge(&ll, ad, &g.w.p);
            st = st_save_hf_opts(&g.w, out, tokenizer[0] ? tokenizer : meta.tokenizer, bf16, shard, &err);
        }
        gpt_free(&g);
    }
    if (st == ST_OK && !merge) st = ckpt_lora_write_adapter(out, &ll, ad, src, &err);
    free(ad);
    ckpt_lora_meta_free(&meta);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    printf("exported %s (LoRA %s) to %s\n", path, merge ? "merged into the base, hf" : "adapter, PEFT", out);
    return 0;
}

/* 1 when path names dir or a place inside it (both resolved; a path that does not exist yet is
 * resolved through its nearest existing parent). */
static int inside(const char *path, const char *dir) {
    char rd[PATH_MAX], rp[PATH_MAX], tmp[PATH_MAX];
    if (!realpath(dir, rd)) return 0;
    snprintf(tmp, sizeof tmp, "%s", path);
    char tail[PATH_MAX] = "";
    while (!realpath(tmp, rp)) { /* walk up to an existing parent, keeping the rest */
        char *sl = strrchr(tmp, '/');
        char t2[PATH_MAX];
        if (snprintf(t2, sizeof t2, "/%s%s", sl ? sl + 1 : tmp, tail) >= (int)sizeof t2) return 0;
        memcpy(tail, t2, sizeof tail);
        if (!sl) { snprintf(tmp, sizeof tmp, "."); continue; }
        if (sl == tmp) { snprintf(tmp, sizeof tmp, "/"); continue; }
        *sl = '\0';
    }
    size_t l = strlen(rd);
    char full[2 * PATH_MAX];
    snprintf(full, sizeof full, "%s%s", rp, tail);
    return !strncmp(full, rd, l) && (full[l] == '\0' || full[l] == '/' || (l == 1 && rd[0] == '/'));
}

/* 1 when dir holds a checkpoint or is a --ckpt-dir: state.json, latest or a step_* entry. */
static int holds_checkpoints(const char *dir) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/state.json", dir);
    return access(p, F_OK) == 0 || ckpt_dir_holds_checkpoints(dir, NULL, 0);
}

/* -o against what is already there, before anything is written. An hf export into a --ckpt-dir or
 * a checkpoint made the folder read as plain weights (eval, sample, export of it then took the
 * exported step, not the newest checkpoint), and one named step_* in a --ckpt-dir was taken for a
 * checkpoint (and removed by retention); a config.json other than a model's was replaced; an llmc
 * export replaced any file (a token shard, written over without a word). hf: the export writes a
 * folder; config: it writes config.json there (not --adapter). */
static Status check_out(const char *out, int hf, int config, Err *err) {
    struct stat sb;
    if (stat(out, &sb) != 0) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", out);
        char *sl = strrchr(parent, '/');
        const char *base = sl ? sl + 1 : out;
        if (sl) *sl = '\0';
        if (hf && !strncmp(base, "step_", 5) && holds_checkpoints(sl ? (parent[0] ? parent : "/") : "."))
            return err_set(err, ST_ERR_INPUT, "-o %s: expected a folder name other than step_* in a --ckpt-dir, found one "
                           "(resume and retention would take the export for a checkpoint)", out);
        return ST_OK; /* a new path */
    }
    if (!hf) {
        if (!S_ISREG(sb.st_mode) || sb.st_size == 0) return ST_OK; /* a device or FIFO is written in place */
        int32_t magic = 0;
        FILE *f = fopen(out, "rb");
        size_t n = f ? fread(&magic, sizeof magic, 1, f) : 0;
        if (f) fclose(f);
        if (n == 1 && magic == 20240326) return ST_OK; /* an earlier llm.c export: replaced */
        return err_set(err, ST_ERR_INPUT, "-o %s: expected a new file or an earlier llm.c export to replace, found "
                       "another file (it would be overwritten)", out);
    }
    if (!S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "-o %s: --format hf writes a folder; expected a folder or a new name, found a "
                       "file", out);
    if (holds_checkpoints(out))
        return err_set(err, ST_ERR_INPUT, "-o %s: expected a folder for weights, found a checkpoint or a --ckpt-dir "
                       "(state.json, latest or step_* in it): the exported weights would be read instead of its "
                       "checkpoints", out);
    char p[PATH_MAX + 32], *text = NULL;
    size_t len;
    snprintf(p, sizeof p, "%s/config.json", out);
    if (!config || access(p, F_OK) != 0) return ST_OK;
    Err ignored;
    cJSON *j = file_read_all(p, &text, &len, &ignored) == ST_OK ? cJSON_Parse(text) : NULL;
    int model = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "model_type"));
    cJSON_Delete(j);
    free(text);
    if (!model)
        return err_set(err, ST_ERR_INPUT, "-o %s: expected a new folder or an earlier export to replace, found a "
                       "config.json that is not a Hugging Face model's (no model_type; it would be overwritten)", out);
    return ST_OK;
}

int cmd_export(int argc, char **argv) {
    char format[16] = "hf", out[1024] = "", tokenizer[256] = "", dtype[16] = "fp32", shard[32] = "5GB", base[1024] = "";
    int merge = 0, adapter = 0;
    ArgSpec specs[] = {
        {"format", ARG_STR, format, sizeof format, "hf (model.safetensors + config.json) | llmc (llm.c fp32 .bin)"},
        {"out", ARG_STR, out, sizeof out, "output: a directory for hf, a file for llmc (-o is accepted)"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "tokenizer recorded in config.json (default: the checkpoint's)"},
        {"dtype", ARG_STR, dtype, sizeof dtype, "hf: tensor dtype, fp32 | bf16 (round to nearest even)"},
        {"max-shard-size", ARG_STR, shard, sizeof shard,
         "hf: split into model-0000k-of-0000n.safetensors + model.safetensors.index.json above this many bytes of "
         "tensors per file (e.g. 5GB, 200MB, 4096; Hugging Face's default 5GB)"},
        {"merge", ARG_FLAG, &merge, 0, "LoRA checkpoint: the base with W + (alpha/r)*B*A folded in, as an hf folder"},
        {"adapter", ARG_FLAG, &adapter, 0,
         "LoRA checkpoint: PEFT's adapter_model.safetensors + adapter_config.json"},
        {"base", ARG_STR, base, sizeof base,
         "LoRA: the base weights --merge folds into, and --adapter's base_model_name_or_path; none given: the "
         "checkpoint's --init-from"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    /* -o is the one short option: rewrite it to --out for the shared parser. */
    char **av = calloc((size_t)argc + 1, sizeof *av);
    if (!av) return cli_fail("export", ST_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < argc; i++) av[i] = strcmp(argv[i], "-o") ? argv[i] : (char *)"--out";
    char *pos[1];
    Err err = {0};
    Status st = args_parse(specs, n, argc, av, pos, 1, &npos, &help, &err);
    free(av);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    if (help || npos != 1) {
        printf("usage: scaletrain export CKPT --format hf|llmc -o OUT\n\n"
               "Writes a checkpoint's weights (CKPT: a step_* directory, a --ckpt-dir or a weights folder).\n\n");
        args_print_help(specs, n);
        return help ? 0 : cli_fail("export", ST_ERR_INPUT, "expected one checkpoint directory, found none");
    }
    if (strcmp(format, "hf") && strcmp(format, "llmc"))
        return cli_fail("export", ST_ERR_INPUT, "--format: expected hf or llmc");
    if (!out[0]) return cli_fail("export", ST_ERR_INPUT, "-o/--out: expected an output path, found none");
    int bf16 = !strcmp(dtype, "bf16");
    if (!bf16 && strcmp(dtype, "fp32"))
        return cli_fail("export", ST_ERR_INPUT, "--dtype: expected fp32 or bf16");
    char *end;
    double lim = strtod(shard, &end);
    double mult = !*end ? 1 : !strcmp(end, "KB") ? 1e3 : !strcmp(end, "MB") ? 1e6 : !strcmp(end, "GB") ? 1e9 : 0;
    /* a whole number of bytes below 2^63: 1e400 (inf) and 1e30 were converted to uint64 out of range
     * (undefined), 1.5 bytes was taken as 1 */
    double bytes = lim * mult;
    if (!(lim > 0) || mult == 0 || end == shard || !(bytes >= 1 && bytes < 9223372036854775808.0) ||
        bytes != floor(bytes)) {
        snprintf(err.msg, sizeof err.msg, "--max-shard-size: expected a positive whole number of bytes below 2^63 (bytes, "
                 "or with KB, MB, GB), found '%s'", shard);
        return cli_fail("export", ST_ERR_INPUT, err.msg);
    }
    if (!strcmp(format, "llmc") && (bf16 || args_find(specs, n, "max-shard-size")->seen))
        return cli_fail("export", ST_ERR_INPUT, "--dtype/--max-shard-size: llm.c's .bin is one fp32 file; expected --format hf");
    if (tokenizer[0] && !strcmp(format, "llmc"))
        return cli_fail("export", ST_ERR_INPUT,
                        "--tokenizer: would change nothing with --format llmc (the .bin records no tokenizer); expected --format hf");
    size_t ol = strlen(out);
    if (!strcmp(format, "llmc") && ol && (out[ol - 1] == '/' || file_is_dir(out))) {
        snprintf(err.msg, sizeof err.msg, "-o %s: --format llmc writes one file; expected a file name (e.g. %s%smodel.bin), "
                 "found a directory%s", out, out, out[ol - 1] == '/' ? "" : "/", out[ol - 1] == '/' ? " name" : "");
        return cli_fail("export", ST_ERR_INPUT, err.msg);
    }

    char src[4096];
    char lpath[4096];
    args_trim_dir(pos[0]); /* "run/" prints as "run", its files as "run/model.safetensors" */
    args_trim_dir(out);    /* -o: a folder here (hf); llmc's file was checked above */
    if (!ckpt_is_weights_folder(pos[0]) && ckpt_lora_locate(pos[0], lpath, sizeof lpath)) {
        if (merge == adapter)
            return cli_fail("export", ST_ERR_INPUT, "a LoRA checkpoint: expected exactly one of --merge or --adapter");
        if (strcmp(format, "hf"))
            return cli_fail("export", ST_ERR_INPUT, "--format: a LoRA export writes Hugging Face / PEFT files; expected hf");
        if (adapter && (bf16 || args_find(specs, n, "max-shard-size")->seen || tokenizer[0]))
            return cli_fail("export", ST_ERR_INPUT, "--adapter: writes PEFT's fp32 files; --dtype, --max-shard-size, "
                            "--tokenizer and --format apply to --merge only");
        if (inside(out, pos[0]) || inside(out, lpath) || (base[0] && inside(out, base))) {
            err_set(&err, ST_ERR_INPUT, "-o %s: expected a folder outside the checkpoint and base being read, found "
                    "it there (the export would overwrite what it reads)", out);
            return cli_fail("export", ST_ERR_INPUT, err.msg);
        }
        if ((st = check_out(out, 1, merge, &err)) != ST_OK) return cli_fail("export", st, err.msg);
        return export_lora(lpath, merge, base, out, tokenizer, bf16, (uint64_t)bytes);
    }
    if (merge || adapter || base[0]) { /* what was given instead, and where the LoRA checkpoint is */
        char ac[4200], opt[4200], sj[4200];
        snprintf(ac, sizeof ac, "%s/adapter_config.json", pos[0]);
        snprintf(opt, sizeof opt, "%s/optimizer.safetensors", pos[0]);
        snprintf(sj, sizeof sj, "%s/state.json", pos[0]);
        /* adapters beside optimizer state or a state.json: a LoRA checkpoint whose state.json does not
         * read (it was called a PEFT adapter folder, a run's --out) */
        int adapters = access(ac, R_OK) == 0, ckpt = access(opt, F_OK) == 0 || access(sj, F_OK) == 0;
        const char *found = access(pos[0], F_OK) != 0 ? "no such file or directory"
                            : adapters && ckpt ? "a LoRA checkpoint whose state.json is missing or does not read as one "
                                                 "(damaged: take an earlier step_ of its --ckpt-dir)"
                            : adapters ? "a PEFT adapter folder (a LoRA run's --out: no base hash, no optimizer "
                                         "state; the run's --ckpt-dir holds the checkpoint)"
                                       : "an ordinary checkpoint or weights folder";
        err_set(&err, ST_ERR_INPUT, "%s: --merge/--adapter/--base: expected a LoRA checkpoint (state.json of format "
                "scaletrain-lora), found %s", pos[0], found);
        return cli_fail("export", ST_ERR_INPUT, err.msg);
    }
    int plain = 0;
    if ((st = cli_resolve_weights("export", pos[0], src, sizeof src, &plain, 0, &err)) != ST_OK)
        return cli_fail("export", st, err.msg);
    if (inside(out, pos[0]) || inside(out, src)) {
        err_set(&err, ST_ERR_INPUT, "-o %s: expected a folder outside the checkpoint or weights being read (%s), "
                "found it there (the export would overwrite what it reads)", out, src);
        return cli_fail("export", ST_ERR_INPUT, err.msg);
    }
    if ((st = check_out(out, !strcmp(format, "hf"), 1, &err)) != ST_OK) return cli_fail("export", st, err.msg);
    ModelConfig cfg;
    char recorded[256];
    if ((st = st_load_hf_config(src, &cfg, recorded, sizeof recorded, &err)) != ST_OK)
        return cli_fail("export", st, err.msg);
    if (tokenizer[0] && (st = check_tokenizer(tokenizer, cfg.vocab, &err)) != ST_OK) return cli_fail("export", st, err.msg);
    if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
    Gpt g = {0};
    if ((st = gpt_init(&g, &cfg, NULL, NULL, &err)) != ST_OK) return cli_fail("export", st, err.msg);
    st = plain ? st_load_hf_weights(&g.w, src, &err) : ckpt_load(src, &g.w, NULL, NULL, &err);
    if (st == ST_OK)
        st = !strcmp(format, "hf") ? st_save_hf_opts(&g.w, out, tokenizer, bf16, (uint64_t)bytes, &err)
                                   : ckpt_export_llmc(&g.w, out, &err);
    gpt_free(&g);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    printf("exported %s (%s) to %s\n", src, format, out);
    return 0;
}
