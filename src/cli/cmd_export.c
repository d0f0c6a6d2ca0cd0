/* cmd_export.c — `scaletrain export CKPT --format hf|llmc -o OUT`: a checkpoint's weights as a
 * Hugging Face GPT-2 folder (model.safetensors + config.json) or an llm.c fp32 .bin.
 *
 * CKPT is a checkpoint directory (verified against its checksums), a --ckpt-dir (its newest
 * valid checkpoint, falling back past corrupt ones with a note on stderr) or a plain weights
 * folder with model.safetensors + config.json (e.g. `train --out`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cmds.h"
#include "cli/cmds_ckpt.h"

int cmd_export(int argc, char **argv) {
    char format[16] = "hf", out[1024] = "", tokenizer[256] = "", dtype[16] = "fp32", shard[32] = "5GB";
    ArgSpec specs[] = {
        {"format", ARG_STR, format, sizeof format, "hf (model.safetensors + config.json) | llmc (llm.c fp32 .bin)"},
        {"out", ARG_STR, out, sizeof out, "output: a directory for hf, a file for llmc (-o is accepted)"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "tokenizer recorded in config.json (default: the checkpoint's)"},
        {"dtype", ARG_STR, dtype, sizeof dtype, "hf: tensor dtype, fp32 | bf16 (round to nearest even)"},
        {"max-shard-size", ARG_STR, shard, sizeof shard,
         "hf: split into model-0000k-of-0000n.safetensors + model.safetensors.index.json above this many bytes of "
         "tensors per file (e.g. 5GB, 200MB, 4096; Hugging Face's default 5GB)"},
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
    if (!(lim > 0) || mult == 0 || end == shard) {
        snprintf(err.msg, sizeof err.msg, "--max-shard-size: expected a positive size (bytes, or with KB, MB, GB), "
                 "found '%s'", shard);
        return cli_fail("export", ST_ERR_INPUT, err.msg);
    }
    if (!strcmp(format, "llmc") && (bf16 || args_find(specs, n, "max-shard-size")->seen))
        return cli_fail("export", ST_ERR_INPUT, "--dtype/--max-shard-size: llm.c's .bin is one fp32 file; expected --format hf");
    if (tokenizer[0] && !strcmp(format, "llmc"))
        return cli_fail("export", ST_ERR_INPUT,
                        "--tokenizer: would change nothing with --format llmc (the .bin records no tokenizer); expected --format hf");

    char src[4096];
    int plain = 0;
    if ((st = cli_resolve_weights("export", pos[0], src, sizeof src, &plain, 0, &err)) != ST_OK)
        return cli_fail("export", st, err.msg);
    ModelConfig cfg;
    char recorded[256];
    if ((st = st_load_hf_config(src, &cfg, recorded, sizeof recorded, &err)) != ST_OK)
        return cli_fail("export", st, err.msg);
    if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
    Gpt g = {0};
    if ((st = gpt_init(&g, &cfg, NULL, NULL, &err)) != ST_OK) return cli_fail("export", st, err.msg);
    st = plain ? st_load_hf_weights(&g.w, src, &err) : ckpt_load(src, &g.w, NULL, NULL, &err);
    if (st == ST_OK)
        st = !strcmp(format, "hf") ? st_save_hf_opts(&g.w, out, tokenizer, bf16, (uint64_t)(lim * mult), &err)
                                   : ckpt_export_llmc(&g.w, out, &err);
    gpt_free(&g);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    printf("exported %s (%s) to %s\n", src, format, out);
    return 0;
}
