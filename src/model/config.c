/* config.c — presets and validation of the model blueprint. */
#include "model/config.h"

#include <stdlib.h>
#include <string.h>

Status model_config_preset(ModelConfig *cfg, const char *name, Err *err) {
    static const struct { const char *name; int L, NH, C; } P[] = {
        {"gpt2-124m", 12, 12, 768}, {"gpt2-350m", 24, 16, 1024},
        {"gpt2-774m", 36, 20, 1280}, {"gpt2-1558m", 48, 25, 1600},
    };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        if (strcmp(name, P[i].name) == 0) {
            cfg->n_layer = P[i].L, cfg->n_head = P[i].NH, cfg->n_embd = P[i].C;
            return ST_OK;
        }
    }
    if (name[0] == 'd' && name[1] >= '1' && name[1] <= '9') {
        char *end;
        long n = strtol(name + 1, &end, 10);
        if (*end == '\0' && n >= 1 && n <= 64) {
            cfg->n_layer = cfg->n_head = (int)n;
            cfg->n_embd = 64 * (int)n;
            return ST_OK;
        }
    }
    return err_set(err, ST_ERR_INPUT,
                   "--model: expected a preset (d1..d64, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m), found '%s'",
                   name);
}

Status model_config_validate(ModelConfig *cfg, Err *err) {
    if (cfg->n_layer < 1 || cfg->n_layer > 1024)
        return err_set(err, ST_ERR_INPUT, "--layers: expected 1..1024, found %d", cfg->n_layer);
    if (cfg->n_head < 1)
        return err_set(err, ST_ERR_INPUT, "--heads: expected a positive integer, found %d", cfg->n_head);
    if (cfg->n_embd < 1 || cfg->n_embd > 65536)
        return err_set(err, ST_ERR_INPUT, "--channels: expected 1..65536, found %d", cfg->n_embd);
    if (cfg->n_embd % cfg->n_head != 0)
        return err_set(err, ST_ERR_INPUT, "--heads %d does not divide --channels %d (expected channels a multiple of heads)",
                       cfg->n_head, cfg->n_embd);
    if (cfg->vocab < 2 || cfg->vocab > (1 << 30))
        return err_set(err, ST_ERR_INPUT, "--vocab: expected 2..2^30, found %d", cfg->vocab);
    if (cfg->max_seq < 1 || cfg->max_seq > (1 << 20))
        return err_set(err, ST_ERR_INPUT, "--max-seq-len: expected 1..1048576, found %d", cfg->max_seq);
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return err_set(err, ST_ERR_INPUT, "--dropout: expected a value in [0, 1), found %g", cfg->dropout);
    cfg->vocab_padded = (cfg->vocab + VOCAB_PAD_MULTIPLE - 1) / VOCAB_PAD_MULTIPLE * VOCAB_PAD_MULTIPLE;
    return ST_OK;
}

long long model_config_num_params(const ModelConfig *cfg) {
    long long L = cfg->n_layer, C = cfg->n_embd;
    return (long long)cfg->vocab * C + (long long)cfg->max_seq * C + L * (12 * C * C + 13 * C) + 2 * C;
}
