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
    char format[16] = "hf", out[1024] = "", tokenizer[256] = "";
    ArgSpec specs[] = {
        {"format", ARG_STR, format, sizeof format, "hf (model.safetensors + config.json) | llmc (llm.c fp32 .bin)"},
        {"out", ARG_STR, out, sizeof out, "output: a directory for hf, a file for llmc (-o is accepted)"},
        {"tokenizer", ARG_STR, tokenizer, sizeof tokenizer, "tokenizer recorded in config.json (default: the checkpoint's)"},
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
    if (tokenizer[0] && !strcmp(format, "llmc"))
        return cli_fail("export", ST_ERR_INPUT,
                        "--tokenizer: would change nothing with --format llmc (the .bin records no tokenizer); expected --format hf");

    char src[4096], note[1536];
    int plain = ckpt_is_weights_folder(pos[0]);
    if (plain) {
        snprintf(src, sizeof src, "%s", pos[0]);
    } else {
        if ((st = ckpt_resolve(NULL, pos[0], src, sizeof src, note, sizeof note, &err)) != ST_OK)
            return cli_fail("export", st, err.msg);
        if (!src[0]) return cli_fail("export", ST_ERR_INPUT, "no checkpoint found in the given directory");
        if (note[0]) fprintf(stderr, "scaletrain export: %s\n", note);
    }
    ModelConfig cfg;
    char recorded[256];
    if ((st = st_load_hf_config(src, &cfg, recorded, sizeof recorded, &err)) != ST_OK)
        return cli_fail("export", st, err.msg);
    if (!tokenizer[0]) snprintf(tokenizer, sizeof tokenizer, "%s", recorded);
    Gpt g = {0};
    if ((st = gpt_init(&g, &cfg, 1, 1, 1, 1, NULL, &err)) != ST_OK) return cli_fail("export", st, err.msg);
    st = plain ? st_load_hf_weights(&g, src, &err) : ckpt_load(src, &g, NULL, NULL, &err);
    if (st == ST_OK) st = !strcmp(format, "hf") ? st_save_hf(&g, out, tokenizer, &err) : ckpt_export_llmc(&g, out, &err);
    gpt_free(&g);
    if (st != ST_OK) return cli_fail("export", st, err.msg);
    printf("exported %s (%s) to %s\n", src, format, out);
    return 0;
}
