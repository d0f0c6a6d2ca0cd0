/* test_ckpt_config.c — config-field kinds on resume (DESIGN.md §5).
 *
 * Oracle: the classification of DESIGN.md §5 applied by hand to each single change of a config
 * built with the trainer's field names (src/train/train.c config_json): model changes refused
 * naming the field and both values, even with overrides; trajectory changes refused unless
 * overridden (then reported); free changes accepted and reported. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "testutil.h"

/* The trainer's config_json() field names and default values. */
static cJSON *base(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(m, "layers", 6);
    cJSON_AddNumberToObject(m, "heads", 6);
    cJSON_AddNumberToObject(m, "channels", 384);
    cJSON_AddNumberToObject(m, "vocab", 256);
    cJSON_AddNumberToObject(m, "vocab_padded", 256);
    cJSON_AddNumberToObject(m, "max_seq_len", 1024);
    cJSON_AddNumberToObject(m, "dropout", 0);
    cJSON_AddStringToObject(o, "data", "data/tiny_*.bin");
    cJSON_AddStringToObject(o, "val_data", "");
    cJSON_AddStringToObject(o, "tokenizer", "bytes");
    cJSON_AddNumberToObject(o, "micro_batch", 8);
    cJSON_AddNumberToObject(o, "seq_len", 256);
    cJSON_AddNumberToObject(o, "grad_accum", 1);
    cJSON_AddStringToObject(o, "optimizer", "adamw");
    cJSON_AddNumberToObject(o, "beta1", 0.9f);
    cJSON_AddNumberToObject(o, "lr", 6e-4f);
    cJSON_AddStringToObject(o, "schedule", "cosine");
    cJSON_AddNumberToObject(o, "warmup", 100);
    cJSON_AddNumberToObject(o, "steps", 1000);
    cJSON_AddNumberToObject(o, "seed", 1337);
    cJSON_AddNumberToObject(o, "data_seed", 42);
    cJSON_AddNumberToObject(o, "threads", 2);
    cJSON_AddNumberToObject(o, "val_every", 100);
    cJSON_AddStringToObject(o, "log", "");
    return o;
}

static void set_num(cJSON *o, const char *path, double v) {
    const char *dot = strchr(path, '.');
    if (dot) {
        char head[64];
        snprintf(head, sizeof head, "%.*s", (int)(dot - path), path);
        o = cJSON_GetObjectItemCaseSensitive(o, head);
        path = dot + 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, path)) cJSON_ReplaceItemInObjectCaseSensitive(o, path, cJSON_CreateNumber(v));
    else cJSON_AddNumberToObject(o, path, v);
}

static void set_str(cJSON *o, const char *k, const char *v) {
    cJSON_ReplaceItemInObjectCaseSensitive(o, k, cJSON_CreateString(v));
}

/* Runs the check; want_ok, and every word of `want` (|-separated) in the message or report. */
static void expect(const char *name, cJSON *cur, const char *const *ov, int nov, int want_ok, const char *want) {
    cJSON *saved = base();
    char report[1024];
    Err e = {0};
    Status st = ckpt_check_config(saved, cur, ov, nov, report, sizeof report, &e);
    const char *text = st == ST_OK ? report : e.msg;
    int ok = (st == ST_OK) == want_ok && (want_ok || st == ST_ERR_INPUT);
    char w[256];
    snprintf(w, sizeof w, "%s", want);
    for (char *tok = strtok(w, "|"); ok && tok; tok = strtok(NULL, "|")) ok = strstr(text, tok) != NULL;
    tu_check(ok, name, "%s: %s", st == ST_OK ? "accepted" : "refused", text);
    cJSON_Delete(saved);
    cJSON_Delete(cur);
}

int main(void) {
    const char *lr[] = {"lr"}, *all[] = {"all"}, *data[] = {"data"};
    cJSON *c;
    expect("config_same", base(), NULL, 0, 1, "");
    c = base(), set_num(c, "model.layers", 8);
    expect("config_model_refused", c, NULL, 0, 0, "model.layers|model field|6|8");
    c = base(), set_num(c, "model.layers", 8);
    expect("config_model_not_overridable", c, all, 1, 0, "model.layers|cannot change");
    c = base(), set_str(c, "tokenizer", "gpt2");
    expect("config_tokenizer_refused", c, all, 1, 0, "tokenizer|\"bytes\"|\"gpt2\"");
    c = base(), set_num(c, "model.max_seq_len", 512);
    expect("config_max_seq_refused", c, NULL, 0, 0, "model.max_seq_len|1024|512");
    c = base(), set_num(c, "lr", 3e-4f);
    expect("config_trajectory_refused", c, NULL, 0, 0, "lr|trajectory|0.000600000028|0.000300000014|--override lr");
    c = base(), set_num(c, "lr", 3e-4f);
    expect("config_trajectory_overridden", c, lr, 1, 1, "override lr: 0.000600000028 -> 0.000300000014");
    c = base(), set_str(c, "data", "data/other_*.bin");
    expect("config_data_refused", c, lr, 1, 0, "data|tiny|other");
    c = base(), set_str(c, "data", "data/other_*.bin");
    expect("config_data_overridden", c, data, 1, 1, "override data");
    c = base(), set_num(c, "seed", 7);
    expect("config_seed_refused", c, NULL, 0, 0, "seed|1337|7");
    c = base(), set_str(c, "schedule", "wsd");
    expect("config_schedule_refused", c, NULL, 0, 0, "schedule|cosine|wsd");
    c = base(), set_num(c, "micro_batch", 4), set_num(c, "grad_accum", 2);
    expect("config_split_free", c, NULL, 0, 1, "free micro_batch: 8 -> 4|free grad_accum: 1 -> 2");
    c = base(), set_num(c, "micro_batch", 4);
    expect("config_global_batch_refused", c, NULL, 0, 0, "global_batch|8|4");
    c = base(), set_num(c, "micro_batch", 4), set_num(c, "dp", 2);
    expect("config_dp_split_free", c, NULL, 0, 1, "free dp: (absent) -> 2");
    c = base(), set_num(c, "threads", 8), set_num(c, "steps", 2000);
    expect("config_free_changes", c, NULL, 0, 1, "free threads: 2 -> 8|free steps: 1000 -> 2000");
    c = base(), set_num(c, "new_knob", 1);
    expect("config_unknown_is_trajectory", c, NULL, 0, 0, "new_knob|(absent)|1");
    c = base(), set_num(c, "lr", 1e-3f), set_num(c, "model.channels", 512);
    expect("config_model_outranks", c, lr, 1, 0, "model.channels|384|512");
    c = base(), set_num(c, "lr", 1e-3f), set_num(c, "seed", 3);
    expect("config_counts_more", c, NULL, 0, 0, "and 1 more changed field");
    c = base(), set_num(c, "model.dropout", 0.1f);
    expect("config_dropout_trajectory", c, NULL, 0, 0, "model.dropout|trajectory");
    return tu_exit();
}
