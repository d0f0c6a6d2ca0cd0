/* cmd_train.c — `scaletrain train`: flags → TrainConfig → train_run. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"

#define ARG_UNSET_INT (-2147483647) /* an int option not given */
#include "cli/cmds.h"
#include "cli/cmds_data.h"
#include "cli/faults.h"
#include "cli/hwprobe.h"
#include "cli/train_args.h"
#include "core/fileio.h"
#include "data/bpe.h"
#include "data/prepare.h"
#include "plan/plan.h"
#include "train/health.h"
#include "train/train.h"

int cli_fail(const char *cmd, int status, const char *msg) {
    fprintf(stderr, "scaletrain %s: %s\n", cmd, msg);
    return status == ST_OK ? 1 : (int)status;
}

/* With no --data, the bundled Tiny Shakespeare is prepared once (byte tokenizer, blank-line
 * documents, 10% validation) into a cache directory and used, so a new user sees loss fall at once.
 * The ranks of a job on one node (and concurrent runs) share that directory: whoever holds an
 * exclusive flock on its .lock prepares it when missing, the others find it done. Without the lock,
 * two ranks of `mpirun -np 2 scaletrain train` on a fresh machine wrote the same work directory at
 * once and one failed (2 of 3 tries: "cannot rename ... .tmp.PID: No such file or directory"). */
static Status bundled_corpus(TrainConfig *c, const Comm *comm, Err *err) {
    char text[1024], cache[900], probe[1000], lockp[1000];
    if (!args_find_data_dir("", "tinyshakespeare/input.txt", text, sizeof text))
        return err_set(err, ST_ERR_INPUT, "--data: not given and the bundled corpus %s is missing", text);
    const char *home = getenv("XDG_CACHE_HOME");
    if (home && home[0]) snprintf(cache, sizeof cache, "%s/scaletrain/tinyshakespeare-bytes", home);
    else snprintf(cache, sizeof cache, "%s/.cache/scaletrain/tinyshakespeare-bytes", getenv("HOME") ? getenv("HOME") : ".");
    snprintf(probe, sizeof probe, "%s/val_000000.bin", cache);
    snprintf(lockp, sizeof lockp, "%s/.lock", cache);
    Status st = file_mkdirs(cache, err);
    if (st != ST_OK) return st;
    int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return err_set(err, ST_ERR_INPUT, "%s: cannot lock the bundled corpus's cache (%s)", lockp, strerror(e));
    }
    if (access(probe, R_OK) != 0) {
        Tokenizer *tk = NULL;
        if ((st = tokenizer_load(&tk, "bytes", NULL, err)) == ST_OK) {
            const char *inputs[1] = {text};
            PrepareOptions po = prepare_default_options();
            po.inputs = inputs, po.ninputs = 1, po.out_dir = cache, po.tok = tk;
            po.separator = "", po.val_fraction = 0.1;
            PrepareStats ps;
            st = prepare_run(&po, &ps, err);
            tokenizer_free(tk);
        }
    }
    close(fd); /* releases the lock */
    if (st != ST_OK) return st;
    /* a notice, on stderr: sweep --list / --dry-run --json resolve runs through this and their
     * stdout must hold only commands or JSON lines; once per process (a sweep or a study parses
     * every run's flags, and said it once per parse) */
    static int said;
    if ((!comm || comm->rank == 0) && !said++)
        fprintf(stderr, "data: no --data given, using the bundled Tiny Shakespeare (bytes) prepared in %s\n", cache);
    snprintf(c->data, sizeof c->data, "%s/train_*.bin", cache);
    if (!c->val_data[0]) snprintf(c->val_data, sizeof c->val_data, "%s/val_*.bin", cache);
    if (!c->tokenizer[0]) snprintf(c->tokenizer, sizeof c->tokenizer, "bytes");
    return ST_OK;
}

/* Refuses an option given where it would change nothing (issue 12: flags that do nothing are
 * defects): one line naming the option and what it needs. c is the parsed configuration. */
/* What a flag of the spike detectors needs when every one is off. */
#define SPIKES_ON "a spike detector on (--spike-z, --spike-abs, --gnorm-spike-z or --gnorm-spike-abs > 0; all are 0)"

static Status refuse_inert(ArgSpec *specs, int n, const TrainConfig *c, const Comm *comm, Err *err) {
    int world = comm ? comm->world : 1;
    /* the grid as train_run resolves it (train_grid_dp; 0: a grid tr_setup_grid refuses) */
    int tp = c->tp > 0 ? c->tp : 1, pp = c->pp > 0 ? c->pp : 1;
    long long tpp = (long long)tp * pp;
    int dp = train_grid_dp(world, c->dp, tp, pp);
    int par = dp > 1 || (dp == 0 && world > 1);
    /* a --dp that with tp and pp (dividing the world: tr_setup_grid says so otherwise) misses the world */
    if (world > 1 && c->dp > 0 && world % tpp == 0 && c->dp * tpp != world)
        return err_set(err, ST_ERR_INPUT, "--dp %d: expected dp x tp x pp = the world size %d (ranks launched), found %d "
                       "x %d x %d = %lld", c->dp, world, c->dp, tp, pp, (long long)c->dp * tp * pp);
    OptimKind ok = c->optim.kind;
    const HealthOptions *h = &c->health;
    int zoff = h->loss.z_threshold == 0 && h->gnorm.z_threshold == 0;
    int spikes_off = zoff && h->loss.abs_threshold == 0 && h->gnorm.abs_threshold == 0;
    int ckpt = c->ckpt_dir[0] != 0;
    int noval = c->data[0] && !c->val_data[0]; /* without --data the bundled corpus brings its validation split */
    const struct { const char *flag; int inert; const char *needs; } R[] = {
        {"loss-scale", !c->fp16, "only with --precision fp16 (the loss scaler)"},
        {"loss-scale-window", !c->fp16, "only with --precision fp16 (the loss scaler)"},
        {"decay-frac", c->sched.kind != SCHED_WSD, "only with --schedule wsd"},
        {"decay-shape", c->sched.kind != SCHED_WSD, "only with --schedule wsd"},
        {"min-lr", c->sched.kind == SCHED_CONSTANT, "a decaying --schedule (cosine, wsd or linear), not constant"},
        {"momentum", ok != OPT_SGD, "only with --optimizer sgd"},
        {"beta1", ok == OPT_SGD, "--optimizer adamw, adam, lion, muon, shampoo or sophia (sgd has --momentum)"},
        {"beta2", ok == OPT_SGD, "--optimizer adamw, adam, lion, muon, shampoo or sophia (sgd has --momentum)"},
        {"eps", ok == OPT_SGD || ok == OPT_LION, "only with --optimizer adamw, adam, muon, shampoo or sophia"},
        {"muon-lr", ok != OPT_MUON, "only with --optimizer muon"},
        {"muon-momentum", ok != OPT_MUON, "only with --optimizer muon"},
        {"shampoo-block", ok != OPT_SHAMPOO, "only with --optimizer shampoo"},
        {"precond-every", ok != OPT_SHAMPOO, "only with --optimizer shampoo"},
        {"shampoo-eps", ok != OPT_SHAMPOO, "only with --optimizer shampoo"},
        {"hess-every", ok != OPT_SOPHIA, "only with --optimizer sophia"},
        {"sophia-gamma", ok != OPT_SOPHIA, "only with --optimizer sophia"},
        {"ckpt-every", !ckpt, "--ckpt-dir"},
        {"keep-last", !ckpt, "--ckpt-dir"},
        {"keep-every", !ckpt, "--ckpt-dir"},
        {"ckpt-async", !ckpt, "--ckpt-dir"},
        {"mtbf", !ckpt, "--ckpt-dir (the interval comes from a checkpoint's write time)"},
        {"mtbf", c->quiet, "no --quiet (the interval is printed)"},
        {"override", !c->resume[0], "--resume"},
        {"sample-tokens", c->sample_every <= 0, "--sample-every N > 0"},
        {"tokenizer-dir", tokenizer_data_subdir(c->tokenizer) == NULL, "--tokenizer gpt2, cl100k, o200k or llama3"},
        {"no-overlap", !par, "data parallelism (dp > 1: more than one data-parallel rank under mpirun; the "
                             "gradient collectives are the data-parallel ones)"},
        /* (ZeRO 2/3 with --pp: par_check_grid's refusal says more) */
        {"zero", !par && c->zero > 0 && !(pp > 1 && c->zero >= 2),
         "data parallelism (dp > 1: more than one data-parallel rank under mpirun -np N): ZeRO shards the optimizer "
         "state, gradients and weights over the data-parallel ranks"},
        {"comm-timeout", world <= 1, "more than one rank (mpirun -np N)"},
        {"val-every", noval && c->val_every > 0, "--val-data (there is nothing to validate on)"},
        {"val-batches", noval, "--val-data (there is nothing to validate on)"},
        {"log-layer-stats", !c->log_path[0], "--log (the statistics go into its step records)"},
        {"keep-every", c->keep_last == 0, "--keep-last K > 0 (--keep-last 0 keeps every checkpoint)"},
        {"no-noise-scale", !plan_noise_scale_on(par ? 2 : 1, pp, c->grad_accum, 0),
         "a run that estimates the gradient noise scale (dp >= 2 or --grad-accum >= 2, with --pp 1)"},
        /* the health monitor: a flag of a detector that is off, or of a policy that never acts */
        {"spike-policy", spikes_off && h->policy != HEALTH_POLICY_LOG, SPIKES_ON},
        {"spike-max-actions", spikes_off, SPIKES_ON},
        {"spike-max-actions", h->policy == HEALTH_POLICY_LOG,
         "--spike-policy skip or rollback (it bounds consecutive skips/rollbacks; log takes no action)"},
        {"spike-min-sigma", zoff && h->min_sigma > 0, "a z-score detector on (--spike-z or --gnorm-spike-z > 0; both are 0)"},
        {"spike-window", spikes_off && h->stall_window <= 0, SPIKES_ON " or --stall-window N > 0"},
        {"spike-min-history", spikes_off && h->stall_window <= 0, SPIKES_ON " or --stall-window N > 0"},
        /* a value out of range is refused as such first (health_validate_options) */
        {"stall-min-delta", h->stall_window <= 0 && h->stall_min_delta >= 0, "--stall-window N > 0 (the stall detector "
                                                                              "is off)"},
        /* the run ends at --steps before it would stop (train_step stops only before the last step) */
        {"stop-after", c->stop_after >= c->steps, "a step below --steps"},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++)
        if (R[i].inert && args_find(specs, n, R[i].flag)->seen)
            return err_set(err, ST_ERR_INPUT, "--%s: would change nothing here; expected %s", R[i].flag, R[i].needs);
    /* rollback reloads the last checkpoint: without --ckpt-dir there is none, and each spike said so */
    if (h->policy == HEALTH_POLICY_ROLLBACK && !ckpt)
        return err_set(err, ST_ERR_INPUT, "--spike-policy rollback: expected --ckpt-dir (the checkpoints it rolls back "
                       "to), found none");
    return ST_OK;
}

/* Whether this process can write directory path (flag: --ckpt-dir, --out) before any training: an
 * existing path must be a writable directory, a missing one's nearest existing ancestor must be.
 * Probed by creating and removing a directory there (mkdtemp): permission bits say yes to root,
 * and /proc refuses mkdir whatever they say. Nothing is left behind, so a run refused later leaves
 * no directory. Before this check `--ckpt-dir /dev/null` failed at the first save and `--out
 * /proc/x` after the last step. */
static Status check_writable_dir(const char *flag, const char *path, Err *err) {
    char dir[1100], probe[1200];
    snprintf(dir, sizeof dir, "%s", path);
    struct stat sb;
    while (stat(dir, &sb) != 0) {
        if (errno != ENOENT)
            return err_set(err, ST_ERR_INPUT, "--%s %s: expected a directory or a path one can be created at, found "
                           "%s unreachable (%s)", flag, path, dir, strerror(errno));
        char *slash = strrchr(dir, '/');
        while (slash && slash > dir && slash[1] == '\0') { /* "a/b/": the name before the trailing slashes */
            *slash = '\0';
            slash = strrchr(dir, '/');
        }
        if (!slash) snprintf(dir, sizeof dir, ".");
        else slash[slash == dir] = '\0'; /* "/x" -> "/" */
    }
    if (!S_ISDIR(sb.st_mode))
        return err_set(err, ST_ERR_INPUT, "--%s %s: expected a directory or a path one can be created at, found %s, "
                       "which is not a directory", flag, path, dir);
    snprintf(probe, sizeof probe, "%s/.scaletrain-probe-XXXXXX", dir);
    if (!mkdtemp(probe))
        return err_set(err, ST_ERR_INPUT, "--%s %s: expected a directory this process can write in, found %s not "
                       "writable (%s)", flag, path, dir, strerror(errno));
    rmdir(probe);
    return ST_OK;
}

/* The model's shape from --model, --arch and --tie-embeddings: a preset sets the architecture and
 * shape (a published Llama shape also its vocabulary, context and theta); flags given explicitly
 * still win. --arch contradicting the preset's family is refused. */
static Status model_flags(ModelConfig *m, const char *model, const char *arch, int arch_seen, int tie, ArgSpec *specs,
                          int n, Err *err) {
    int a = model_arch_parse(arch), preset_untied = 1; /* Llama's default head: untied */
    if (a < 0) return err_set(err, ST_ERR_INPUT, "--arch: expected gpt2 or llama, found '%s'", arch);
    m->arch = a;
    if (model[0]) {
        ModelConfig p = *m;
        Status st = model_config_preset(&p, model, err);
        if (st != ST_OK) return st;
        if (arch_seen && p.arch != a)
            return err_set(err, ST_ERR_INPUT, "--arch %s: expected the family of --model %s (%s), found another", arch,
                           model, model_arch_name(p.arch));
        static const struct { const char *flag; size_t off; } F[] = {
            {"layers", offsetof(ModelConfig, n_layer)}, {"heads", offsetof(ModelConfig, n_head)},
            {"channels", offsetof(ModelConfig, n_embd)}, {"kv-heads", offsetof(ModelConfig, n_kv_head)},
            {"ffn", offsetof(ModelConfig, ffn)}, {"vocab", offsetof(ModelConfig, vocab)},
            {"max-seq-len", offsetof(ModelConfig, max_seq)},
        };
        for (size_t i = 0; i < sizeof F / sizeof F[0]; i++)
            if (!args_find(specs, n, F[i].flag)->seen) memcpy((char *)m + F[i].off, (char *)&p + F[i].off, sizeof(int));
        if (!args_find(specs, n, "rope-theta")->seen) m->rope_theta = p.rope_theta;
        /* the preset's RoPE scaling (Llama 3.1/3.2) and head tying come with its shape; flags win */
        static const struct { const char *flag; size_t off; } R[] = {
            {"rope-factor", offsetof(ModelConfig, rope_factor)},
            {"rope-low-freq-factor", offsetof(ModelConfig, rope_low_freq_factor)},
            {"rope-high-freq-factor", offsetof(ModelConfig, rope_high_freq_factor)},
            {"rope-original-max-seq-len", offsetof(ModelConfig, rope_orig_max_seq)},
            {"rope-type", offsetof(ModelConfig, rope_type)},
        };
        for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) /* 4-byte fields (float, int) */
            if (!args_find(specs, n, R[i].flag)->seen) memcpy((char *)m + R[i].off, (char *)&p + R[i].off, 4);
        preset_untied = p.untied;
        m->arch = p.arch;
    }
    if (m->arch == ARCH_LLAMA) m->untied = tie ? 0 : preset_untied;
    return ST_OK;
}

/* The Llama-only flags on a model that is a GPT-2, checked on the final model (--init-from of a
 * Llama folder makes a Llama of a run without --arch: they were refused there before it was read). */
static Status llama_only_flags(const ModelConfig *m, ArgSpec *specs, int n, int tie, int init_from, Err *err) {
    if (m->arch == ARCH_LLAMA) return ST_OK;
    static const char *const llama_only[] = {"kv-heads", "ffn", "ffn-multiple", "norm-eps", "rope-theta",
                                             "rope-type", "rope-factor", "rope-low-freq-factor",
                                             "rope-high-freq-factor", "rope-original-max-seq-len", "tie-embeddings"};
    for (size_t i = 0; i < sizeof llama_only / sizeof llama_only[0]; i++) {
        int is_tie = !strcmp(llama_only[i], "tie-embeddings"); /* a flag: false (from --config) asks nothing */
        if (is_tie ? tie : args_find(specs, n, llama_only[i])->seen)
            return err_set(err, ST_ERR_INPUT, "--%s: expected a Llama (--arch llama, a llama preset or --init-from of "
                           "a Llama folder; a Llama option%s), found a GPT-2%s", llama_only[i],
                           is_tie ? ", and GPT-2's head always reads wte" : "", init_from ? " (--init-from)" : "");
    }
    return ST_OK;
}

/* Values refused before anything else reads them: a negative grid size, timeout or a count beyond
 * what a run can hold used to fall back to the default or end in "out of memory" naming nothing;
 * an empty path or name counted as not given (`--data ''` trained on the bundled corpus). */
static Status check_values(ArgSpec *specs, int n, const TrainConfig *c, Err *err) {
    const struct { const char *flag; int v; const char *what; } G[] = {
        {"dp", c->dp, "a positive number of data-parallel ranks (0: the world size)"},
        {"tp", c->tp, "a positive number of tensor-parallel ranks"},
        {"pp", c->pp, "a positive number of pipeline stages"},
        {"interleave", c->interleave, "a positive number of model chunks per pipeline rank"},
    };
    /* 0 is what an absent --tp, --pp or --interleave reads as (one); given, it is refused like -1
     * (--dp 0 is documented: the world size) */
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
        if (G[i].v < 0 || (G[i].v == 0 && i > 0 && args_find(specs, n, G[i].flag)->seen))
            return err_set(err, ST_ERR_INPUT, "--%s %d: expected %s, found %d", G[i].flag, G[i].v, G[i].what, G[i].v);
    if (!(c->comm_timeout >= 0))
        return err_set(err, ST_ERR_INPUT, "--comm-timeout %g: expected seconds > 0 (0: 600), found %g", c->comm_timeout,
                       c->comm_timeout);
    if (c->steps > TRAIN_MAX_STEPS)
        return err_set(err, ST_ERR_INPUT, "--steps: expected 1..%ld optimizer steps, found %ld", TRAIN_MAX_STEPS, c->steps);
    static const struct { const char *flag, *what; } E[] = {
        {"data", "a path or glob of token shards"}, {"val-data", "a path or glob of token shards"},
        {"out", "a path"}, {"log", "a path"}, {"ckpt-dir", "a path"}, {"tokenizer-dir", "a path"},
        {"resume", "auto or a checkpoint directory"}, {"init-from", "a path"}, {"model", "a preset name"},
        {"hardware", "a plan preset or a profile FILE.json"}, {"tokenizer", "a tokenizer name, file or directory"},
        {"override", "trajectory fields or all"}, {"pp-schedule", "gpipe, 1f1b, interleaved or zb-h1"},
        {"pp-layers", "blocks per stage, e.g. 4,4,3,3"}, {"device", "a device name"},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        ArgSpec *s = args_find(specs, n, E[i].flag);
        if (s->seen && !*(const char *)s->dst)
            return err_set(err, ST_ERR_INPUT, "--%s: expected %s, found an empty string", E[i].flag, E[i].what);
    }
    /* -0 passed ">= 0" and read "give --min-lr in [0, -0]" */
    if (signbit(c->sched.lr) && c->sched.lr == 0)
        return err_set(err, ST_ERR_INPUT, "--lr: expected a value >= 0, found -0");
    return ST_OK;
}

int cmd_train(int argc, char **argv) { return cmd_train_comm(argc, argv, NULL); }

/* The option table of `train`, as names and kinds, for callers that build train command lines
 * (sweep). Filled by train_args_impl when probe is not NULL (then nothing is parsed). */
typedef struct {
    int n;
    const char *name[TRAIN_ARGS_MAX_OPTIONS];
    int is_flag[TRAIN_ARGS_MAX_OPTIONS];
} TrainOptionTable;

static Status train_args_impl(int argc, char **argv, const Comm *comm, TrainArgs *a, TrainOptionTable *probe, Err *e) {
    memset(a, 0, sizeof *a);
    TrainConfig c = train_default_config();
    char hardware[1024] = "";
    Tokenizer *sample_tk = NULL;
    char param[16] = "sp";
    char rope_type[16] = "";
    char model[64] = "", arch[16] = "gpt2", precision[16] = "fp32", recompute[16] = "none", spike_policy[16] = "log", optimizer[16] = "adamw", schedule[16] = "cosine", shape[16] = "linear", tok_dir[1024] = "";
    long batch_tokens = 0;
    int tie = 0, doc_mask = 0;
    char lora_base_prec[16] = "fp32";
    char lora_targets[128] = "";
    float lora_alpha = 0;
    double peak_gflops = 0;
    float beta1 = -1, beta2 = -1, wd = -1, eps = -1, momentum = -1, muon_lr = -1, muon_mom = -1, sh_eps = -1, gamma = -1;
    int sh_block = ARG_UNSET_INT, sh_every = ARG_UNSET_INT, hess_every = ARG_UNSET_INT; /* unset: the optimizer's default */
    ArgSpec specs[] = {
        {"model", ARG_STR, model, sizeof model, "preset, sets the shape and --arch (the list: below)"},
        {"arch", ARG_STR, arch, sizeof arch, "gpt2 | llama (RMSNorm, RoPE, SwiGLU, grouped-query attention)"},
        {"kv-heads", ARG_INT, &c.model.n_kv_head, 0, "llama: key/value heads, dividing --heads (0: --heads)"},
        {"ffn", ARG_INT, &c.model.ffn, 0, "llama: MLP width F (0: 8C/3 rounded up to --ffn-multiple)"},
        {"ffn-multiple", ARG_INT, &c.model.ffn_multiple, 0, "llama: the default F's rounding (0: 256)"},
        {"norm-eps", ARG_FLOAT, &c.model.norm_eps, 0, "llama: RMSNorm epsilon (0: 1e-5)"},
        {"rope-theta", ARG_FLOAT, &c.model.rope_theta, 0, "llama: RoPE base (0: 10000)"},
        {"rope-type", ARG_STR, rope_type, sizeof rope_type,
         "llama: default | linear (frequencies / --rope-factor) | llama3 (Llama 3.1's scaling); not given: the preset's"},
        {"rope-factor", ARG_FLOAT, &c.model.rope_factor, 0, "llama: --rope-type linear or llama3: the factor"},
        {"rope-low-freq-factor", ARG_FLOAT, &c.model.rope_low_freq_factor, 0, "llama: --rope-type llama3: low_freq_factor"},
        {"rope-high-freq-factor", ARG_FLOAT, &c.model.rope_high_freq_factor, 0,
         "llama: --rope-type llama3: high_freq_factor"},
        {"rope-original-max-seq-len", ARG_INT, &c.model.rope_orig_max_seq, 0,
         "llama: --rope-type llama3: original_max_position_embeddings"},
        {"tie-embeddings", ARG_FLAG, &tie, 0, "llama: the LM head reads wte (default: its own lm_head)"},
        {"param", ARG_STR, param, sizeof param,
         "sp | mup (maximal update parameterization: hyperparameters tuned at --mup-base-width transfer in width)"},
        {"mup-base-width", ARG_FLOAT, &c.model.mup_base_width, 0, "mup: the width W0 the hyperparameters were tuned at"},
        {"mup-input-alpha", ARG_FLOAT, &c.model.mup_input_alpha, 0, "mup: embedding output multiplier (0: 1)"},
        {"mup-output-alpha", ARG_FLOAT, &c.model.mup_output_alpha, 0, "mup: logit multiplier before 1/m (0: 1)"},
        {"layers", ARG_INT, &c.model.n_layer, 0, "transformer blocks L"},
        {"heads", ARG_INT, &c.model.n_head, 0, "attention heads NH (must divide channels)"},
        {"channels", ARG_INT, &c.model.n_embd, 0, "model width C"},
        {"vocab", ARG_INT, &c.model.vocab, 0, "vocabulary size (0: from the shard headers)"},
        {"max-seq-len", ARG_INT, &c.model.max_seq, 0, "maximum sequence length (position table)"},
        {"dropout", ARG_FLOAT, &c.model.dropout, 0, "dropout on embeddings, attention and residual branches"},
        {"data", ARG_STR, c.data, sizeof c.data, "training shards: path or glob (none: the bundled Tiny Shakespeare)"},
        {"val-data", ARG_STR, c.val_data, sizeof c.val_data, "validation shards: path or glob"},
        {"tokenizer", ARG_STR, c.tokenizer, sizeof c.tokenizer,
         "gpt2 | cl100k | o200k | llama3 | bytes | FILE.tkr | DIR: checked against the shards, recorded for `sample`"},
        {"tokenizer-dir", ARG_DIR, tok_dir, sizeof tok_dir, "where the named tokenizer's files are (gpt2: encoder.json, vocab.bpe; cl100k, o200k: NAME_base.tkr; llama3: tokenizer.model)"},
        {"micro-batch", ARG_INT, &c.micro_batch, 0, "sequences per micro-batch B"},
        {"seq-len", ARG_INT, &c.seq_len, 0, "tokens per sequence T"},
        {"grad-accum", ARG_INT, &c.grad_accum, 0, "micro-batches per optimizer step k"},
        {"batch-tokens", ARG_LONG, &batch_tokens, 0, "tokens per optimizer step (sets --grad-accum; 0: unused)"},
        {"optimizer", ARG_STR, optimizer, sizeof optimizer, "adamw | adam (L2 decay) | sgd (momentum) | lion | muon | shampoo (hidden matrices; AdamW for the rest) | sophia"},
        {"lr", ARG_FLOAT, &c.sched.lr, 0, "peak learning rate"},
        {"min-lr", ARG_FLOAT, &c.sched.min_lr, 0, "final learning rate of cosine/linear/wsd decay"},
        {"warmup", ARG_LONG, &c.sched.warmup, 0, "linear warmup steps"},
        {"schedule", ARG_STR, schedule, sizeof schedule, "cosine | wsd | linear | constant"},
        {"decay-frac", ARG_FLOAT, &c.sched.decay_frac, 0, "wsd: fraction of the steps spent decaying"},
        {"decay-shape", ARG_STR, shape, sizeof shape, "wsd decay shape: linear | cosine | 1-sqrt"},
        {"weight-decay", ARG_FLOAT, &wd, 0, "weight decay (-1: optimizer default, 0.1 adamw/adam, 1.0 lion, 0 sgd, 0.2 sophia)"},
        {"beta1", ARG_FLOAT, &beta1, 0, "first-moment decay (-1: 0.9; sophia 0.965)"},
        {"beta2", ARG_FLOAT, &beta2, 0, "second-moment decay (-1: 0.95; lion 0.99; sophia: the Hessian EMA, 0.99)"},
        {"eps", ARG_FLOAT, &eps, 0, "Adam epsilon (-1: 1e-8); sophia: the denominator's floor (-1: 1e-15)"},
        {"momentum", ARG_FLOAT, &momentum, 0, "SGD momentum (-1: 0.9)"},
        {"muon-lr", ARG_FLOAT, &muon_lr, 0, "Muon: peak learning rate of the hidden matrices (-1: 0.02; --lr is AdamW's)"},
        {"muon-momentum", ARG_FLOAT, &muon_mom, 0, "Muon: Nesterov momentum beta (-1: 0.95)"},
        {"shampoo-block", ARG_INT, &sh_block, 0, "Shampoo: largest block side in rows and cols (default 512)"},
        {"precond-every", ARG_INT, &sh_every, 0, "Shampoo: steps between inverse 4th roots (default 10)"},
        {"shampoo-eps", ARG_FLOAT, &sh_eps, 0, "Shampoo: epsilon added to the statistics (-1: 1e-6)"},
        {"hess-every", ARG_INT, &hess_every, 0, "Sophia: steps between Hessian estimates (default 10; an extra forward+backward)"},
        {"sophia-gamma", ARG_FLOAT, &gamma, 0, "Sophia: gamma of the clipped update clip(m / max(gamma*h, eps), 1) (-1: 0.04)"},
        {"grad-clip", ARG_FLOAT, &c.grad_clip, 0, "clip the global gradient L2 norm to this (0: off)"},
        {"steps", ARG_LONG, &c.steps, 0, "optimizer steps"},
        {"seed", ARG_U64, &c.seed, 0, "initialisation and dropout seed (decimal)"},
        {"data-seed", ARG_U64, &c.data_seed, 0, "data order seed (decimal)"},
        {"threads", ARG_INT, &c.threads, 0,
         "threads for our kernels and the GEMM library (0: the CPUs this rank may run on, shared among its node's ranks)"},
        {"device", ARG_STR, c.device, sizeof c.device, "where the model computes: cpu (cuda only in a build with CUDA)"},
        {"hardware", ARG_STR, hardware, sizeof hardware,
         "hardware profile for the plan's predicted step time: a plan preset or FILE.json from plan --measure-hardware"},
        {"peak-gflops", ARG_DOUBLE, &peak_gflops, 0,
         "peak GFLOP/s for MFU (0: the best of the FMA probe and a GEMM, cached per machine; docs/plan.md)"},
        {"remeasure-peak", ARG_FLAG, &c.remeasure_peak, 0,
         "measure the peak now even if this machine's cache has it, and update the cache"},
        {"val-every", ARG_INT, &c.val_every, 0, "validate every N steps (0: only at the end)"},
        {"val-batches", ARG_INT, &c.val_batches, 0, "micro-batches per validation"},
        {"sample-every", ARG_INT, &c.sample_every, 0, "print and log a generated sample every N steps (0: never)"},
        {"sample-tokens", ARG_INT, &c.sample_tokens, 0, "tokens per generated sample"},
        {"log", ARG_STR, c.log_path, sizeof c.log_path, "JSON Lines metrics file"},
        {"out", ARG_DIR, c.out_dir, sizeof c.out_dir, "directory for the final weights (model.safetensors)"},
        {"quiet", ARG_FLAG, &c.quiet, 0, "no per-step lines (a stop before --steps is still said, on stderr)"},
        {"precision", ARG_STR, precision, sizeof precision,
         "fp32 | bf16 (bf16 GEMM inputs, fp32 accumulation, fp32 master weights and moments) | fp16 (with loss scaling)"},
        {"loss-scale", ARG_FLOAT, &c.loss_scale, 0, "fp16: initial loss scale"},
        {"loss-scale-window", ARG_INT, &c.loss_scale_window, 0, "fp16: clean steps before the loss scale doubles"},
        {"recompute", ARG_STR, recompute, sizeof recompute,
         "none | selective (LayerNorm and GELU outputs) | full (each block's forward rerun in backward)"},
        {"no-pack", ARG_FLAG, &c.no_pack, 0, "one document per row with the padding masked (default: packed rows)"},
        {"doc-mask", ARG_FLAG, &doc_mask, 0,
         "document masking in packed rows: attention stays inside each document (ended by EOT), positions restart "
         "at 0 (docs/doc-mask.md)"},
        {"no-noise-scale", ARG_FLAG, &c.no_noise_scale, 0,
         "do not estimate the gradient noise scale (logged when dp >= 2 or --grad-accum >= 2, without --pp)"},
        {"ckpt-dir", ARG_DIR, c.ckpt_dir, sizeof c.ckpt_dir, "directory of checkpoints step_NNNNNNNN/"},
        {"ckpt-every", ARG_INT, &c.ckpt_every, 0, "steps between checkpoints (0: at the end and on SIGTERM only)"},
        {"keep-last", ARG_INT, &c.keep_last, 0, "keep the newest K checkpoints (0: all)"},
        {"keep-every", ARG_INT, &c.keep_every, 0, "also keep every checkpoint whose step is a multiple of M"},
        {"ckpt-async", ARG_FLAG, &c.ckpt_async, 0, "copy the state and write checkpoints from a background thread"},
        {"resume", ARG_STR, c.resume, sizeof c.resume, "auto (newest valid in --ckpt-dir) or a checkpoint directory"},
        {"override", ARG_STR, c.overrides, sizeof c.overrides,
         "trajectory fields allowed to differ from the checkpoint on resume, comma-separated, or all (another name is "
         "refused, listing them)"},
        {"init-from", ARG_DIR, c.init_from, sizeof c.init_from,
         "start from weights: a Hugging Face GPT-2 or Llama folder (its config.json gives the model unless shape "
         "flags are given), a model.safetensors file, or an llm.c .bin"},
        {"spike-policy", ARG_STR, spike_policy, sizeof spike_policy,
         "log | skip (discard the update) | rollback (reload the last checkpoint, skip the batches since)"},
        {"spike-window", ARG_INT, &c.health.window, 0, "steps in the rolling median of loss and gradient norm"},
        {"spike-min-history", ARG_INT, &c.health.min_history, 0, "steps before detection starts"},
        {"spike-min-sigma", ARG_DOUBLE, &c.health.min_sigma, 0, "floor of the robust sigma the z-scores divide by"},
        {"spike-z", ARG_DOUBLE, &c.health.loss.z_threshold, 0, "loss spike: robust z-score above the median (0: off)"},
        {"spike-abs", ARG_DOUBLE, &c.health.loss.abs_threshold, 0, "loss spike: nats above the median (0: off)"},
        {"gnorm-spike-z", ARG_DOUBLE, &c.health.gnorm.z_threshold, 0, "gradient-norm spike: robust z (0: off)"},
        {"gnorm-spike-abs", ARG_DOUBLE, &c.health.gnorm.abs_threshold, 0, "gradient-norm spike: above the median (0: off)"},
        {"spike-max-actions", ARG_INT, &c.health.max_actions, 0, "consecutive skips/rollbacks before the run stops"},
        {"max-nonfinite", ARG_INT, &c.health.max_nonfinite, 0, "consecutive non-finite steps before the run stops"},
        {"stall-window", ARG_INT, &c.health.stall_window, 0, "report a stall after this many steps without improvement (0: off)"},
        {"stall-min-delta", ARG_DOUBLE, &c.health.stall_min_delta, 0, "--stall-window: a fall of the loss median that counts (nats)"},
        {"dp", ARG_INT, &c.dp, 0, "data-parallel ranks (0: the world size); dp x tp x pp must equal it"},
        {"tp", ARG_INT, &c.tp, 0, "tensor-parallel ranks (Megatron layer splits; divides --heads and the world)"},
        {"sp", ARG_FLAG, &c.sp, 0, "sequence parallelism inside the tp group (needs --tp > 1)"},
        {"pp", ARG_INT, &c.pp, 0, "pipeline stages (blocks split by FLOPs; dp x tp x pp must equal the world)"},
        {"pp-schedule", ARG_STR, c.pp_schedule, sizeof c.pp_schedule, "gpipe | 1f1b | interleaved | zb-h1 (not given: 1f1b, or interleaved with --interleave > 1)"},
        {"pp-layers", ARG_STR, c.pp_layers, sizeof c.pp_layers, "blocks per (virtual) stage, e.g. 4,4,3,3 (default: balanced)"},
        {"interleave", ARG_INT, &c.interleave, 0, "model chunks per pipeline rank (--pp-schedule interleaved)"},
        {"pp-print-schedule", ARG_FLAG, &c.pp_print_schedule, 0, "print each pipeline rank's ops (F/B/W, micro-batch) at the start"},
        {"zero", ARG_INT, &c.zero, 0, "ZeRO stage: 0 replicate, 1 shard moments, 2 + gradients, 3 + parameters"},
        {"comm-timeout", ARG_DOUBLE, &c.comm_timeout, 0, "seconds before a stuck collective ends the job (0: 600)"},
        {"no-overlap", ARG_FLAG, &c.no_overlap, 0, "start gradient collectives after the backward pass (measurement)"},
        {"log-layer-stats", ARG_FLAG, &c.log_layer_stats, 0,
         "log per-layer gradient, weight and update norms in every step record (one process, ZeRO 0)"},
        {"stop-after", ARG_LONG, &c.stop_after, 0,
         "stop after this step (below --steps) as if preempted: checkpoint and exit 0 (the schedule still spans --steps; "
         "0: off)"},
        {"lora-rank", ARG_INT, &c.lora.rank, 0,
         "LoRA fine-tuning: adapters of this rank r on a frozen base (0: off; docs/lora.md)"},
        {"lora-alpha", ARG_FLOAT, &lora_alpha, 0,
         "LoRA: the adapters' scale is alpha / r, alpha > 0 (default: alpha = r)"},
        {"lora-dropout", ARG_FLOAT, &c.lora.dropout, 0, "LoRA: dropout on the adapters' input"},
        {"lora-targets", ARG_STR, lora_targets, sizeof lora_targets,
         "LoRA: layers adapted, from q,k,v,o,gate,up,down or the groups attn, mlp, all; none given: llama q,v, gpt2 "
         "q,k,v (its fused c_attn)"},
        {"lora-base-precision", ARG_STR, lora_base_prec, sizeof lora_base_prec,
         "LoRA: storage of the frozen base's blocks, fp32 (default) or bf16 (computed in fp32 from bf16 values)"},
        {"mtbf", ARG_DOUBLE, &c.mtbf_hours, 0, "mean time between failures in hours: print the Young/Daly interval"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]), npos = 0, help = 0;
    if (probe) {
        probe->n = 0;
        for (int i = 0; i < n && i < TRAIN_ARGS_MAX_OPTIONS; i++, probe->n++)
            probe->name[i] = specs[i].name, probe->is_flag[i] = specs[i].type == ARG_FLAG;
        return ST_OK;
    }
    char *pos[1];
    Err err = {0};
#define FAIL(st_) return *e = err, (st_)
    Status st = args_parse(specs, n, argc, argv, pos, 0, &npos, &help, &err);
    if (st != ST_OK) FAIL(st);
    if (help) {
        printf("usage: scaletrain train --data SHARDS [options]\n\nTrains a GPT-2 or Llama model on token shards (under mpirun for more than one process).\n\n");
        args_print_help(specs, n);
        printf("\n--model presets (one table with plan's): %s\n", model_preset_names());
        a->help = 1;
        return ST_OK;
    }
    if ((st = check_values(specs, n, &c, &err)) != ST_OK) FAIL(st);
    if (args_find(specs, n, "rope-type")->seen && (c.model.rope_type = model_rope_type_parse(rope_type)) < 0) {
        snprintf(err.msg, sizeof err.msg, "--rope-type: expected default, linear or llama3, found '%s'", rope_type);
        FAIL(ST_ERR_INPUT);
    }
    if ((st = model_flags(&c.model, model, arch, args_find(specs, n, "arch")->seen, tie, specs, n, &err)) !=
        ST_OK)
        FAIL(st);
    if ((c.model.param = model_param_parse(param)) < 0) {
        snprintf(err.msg, sizeof err.msg, "--param: expected sp or mup, found '%s'", param);
        FAIL(ST_ERR_INPUT);
    }
    /* --init-from: the model is the file's shape (its config.json, or an llm.c header), with only
     * the shape flags given overriding it (issue 26: one flag used to drop the rest of the shape to
     * the defaults). --model or --arch instead says the whole shape, and the file is checked
     * against it. The tokenizer recorded with the weights becomes the run's unless --tokenizer is
     * given, so shards of another tokenizer are refused; a --tokenizer other than it is refused. */
    char recorded[256] = "";
    if (c.init_from[0]) {
        ModelConfig given = c.model, fc;
        char cdir[1100], cjson[1200];
        snprintf(cdir, sizeof cdir, "%s", c.init_from);
        size_t ln = strlen(cdir);
        int is_dir = file_is_dir(cdir), is_st = ln > 12 && !strcmp(cdir + ln - 12, ".safetensors");
        if (!is_dir) { /* a .safetensors file: its config.json is beside it; an llm.c .bin: its header */
            char *slash = strrchr(cdir, '/');
            if (slash) *slash = '\0';
            else snprintf(cdir, sizeof cdir, ".");
        }
        snprintf(cjson, sizeof cjson, "%s/config.json", cdir);
        int has_json = (is_dir || is_st) && access(cjson, F_OK) == 0;
        if (has_json && (st = st_load_hf_config(cdir, &fc, recorded, sizeof recorded, &err)) != ST_OK)
            return err_prefix(&err, "--init-from"), *e = err, st;
        int from_file = !args_find(specs, n, "model")->seen && !args_find(specs, n, "arch")->seen;
        /* a folder without config.json (bare weights): the flags say the shape, as before */
        if (from_file && (has_json || (!is_dir && (st = ckpt_peek_config(c.init_from, &fc, &err)) == ST_OK))) {
            static const struct { const char *flag; size_t off, size; } O[] = {
                {"layers", offsetof(ModelConfig, n_layer), sizeof(int)},
                {"heads", offsetof(ModelConfig, n_head), sizeof(int)},
                {"channels", offsetof(ModelConfig, n_embd), sizeof(int)},
                {"kv-heads", offsetof(ModelConfig, n_kv_head), sizeof(int)},
                {"ffn", offsetof(ModelConfig, ffn), sizeof(int)},
                {"ffn-multiple", offsetof(ModelConfig, ffn_multiple), sizeof(int)},
                {"vocab", offsetof(ModelConfig, vocab), sizeof(int)},
                {"max-seq-len", offsetof(ModelConfig, max_seq), sizeof(int)},
                {"norm-eps", offsetof(ModelConfig, norm_eps), sizeof(float)},
                {"rope-theta", offsetof(ModelConfig, rope_theta), sizeof(float)},
                {"rope-type", offsetof(ModelConfig, rope_type), sizeof(int)},
                {"rope-factor", offsetof(ModelConfig, rope_factor), sizeof(float)},
                {"rope-low-freq-factor", offsetof(ModelConfig, rope_low_freq_factor), sizeof(float)},
                {"rope-high-freq-factor", offsetof(ModelConfig, rope_high_freq_factor), sizeof(float)},
                {"rope-original-max-seq-len", offsetof(ModelConfig, rope_orig_max_seq), sizeof(int)},
                {"param", offsetof(ModelConfig, param), sizeof(int)},
                {"mup-base-width", offsetof(ModelConfig, mup_base_width), sizeof(float)},
                {"mup-input-alpha", offsetof(ModelConfig, mup_input_alpha), sizeof(float)},
                {"mup-output-alpha", offsetof(ModelConfig, mup_output_alpha), sizeof(float)},
            };
            for (size_t i = 0; i < sizeof O / sizeof O[0]; i++)
                if (args_find(specs, n, O[i].flag)->seen) memcpy((char *)&fc + O[i].off, (char *)&given + O[i].off, O[i].size);
            if (tie) fc.untied = 0;
            if (args_find(specs, n, "param")->seen) /* another parameterization: its multipliers are the flags' */
                fc.mup_base_width = given.mup_base_width, fc.mup_input_alpha = given.mup_input_alpha,
                fc.mup_output_alpha = given.mup_output_alpha;
            if (fc.arch == ARCH_GPT2) fc.n_kv_head = 0, fc.ffn = 0; /* derived from --heads, --channels */
            fc.dropout = given.dropout;
            c.model = fc;
        } else if (from_file && !is_dir) { /* ckpt_peek_config's "cannot open" names the flag itself */
            if (strncmp(err.msg, "--init-from", 11)) err_prefix(&err, "--init-from");
            return *e = err, st;
        }
        if (recorded[0] && !args_find(specs, n, "tokenizer")->seen) {
            snprintf(c.tokenizer, sizeof c.tokenizer, "%s", recorded);
        } else if (recorded[0] && strcmp(c.tokenizer, recorded)) {
            snprintf(err.msg, sizeof err.msg, "--tokenizer %s: the weights of --init-from %.400s were trained with "
                     "tokenizer %s (their config.json): expected --tokenizer %s or none (then shards of another "
                     "tokenizer are refused)", c.tokenizer, c.init_from, recorded, recorded);
            FAIL(ST_ERR_INPUT);
        }
    }
    if ((st = llama_only_flags(&c.model, specs, n, tie, c.init_from[0] != 0, &err)) != ST_OK) FAIL(st);
    /* --ffn-multiple rounds only the default width 8C/3: with F given (--ffn, a preset's, a config.json's) it did nothing */
    if (args_find(specs, n, "ffn-multiple")->seen && c.model.ffn > 0) {
        snprintf(err.msg, sizeof err.msg, "--ffn-multiple %d: would change nothing here; expected the default MLP width "
                 "(no --ffn: 8C/3 rounded up to it), found F = %d from %s", c.model.ffn_multiple, c.model.ffn,
                 args_find(specs, n, "ffn")->seen ? "--ffn" : model[0] ? "--model" : "--init-from");
        FAIL(ST_ERR_INPUT);
    }
    /* muP's multipliers under sp: 0 read as "not given" (-1 was refused by the model's checks) */
    if (c.model.param == PARAM_SP) {
        static const char *const MUP[] = {"mup-base-width", "mup-input-alpha", "mup-output-alpha"};
        for (int i = 0; i < 3; i++)
            if (args_find(specs, n, MUP[i])->seen) {
                snprintf(err.msg, sizeof err.msg, "--param sp: expected no --mup-base-width, --mup-input-alpha or "
                         "--mup-output-alpha (they are muP's; use --param mup), found --%s %g", MUP[i],
                         *(float *)args_find(specs, n, MUP[i])->dst);
                FAIL(ST_ERR_INPUT);
            }
    }
    /* This run's flag, also over --init-from's config.json (the EOT comes from the shards' header) */
    c.model.doc_mask = doc_mask, c.model.doc_eot = 0;
    if (doc_mask && c.no_pack) {
        snprintf(err.msg, sizeof err.msg, "--doc-mask: expected packed rows, found --no-pack (each row already holds "
                 "one document, its padding masked; drop one of the two)");
        FAIL(ST_ERR_INPUT);
    }
    if (c.lora.rank < 0) { /* train_run dispatches on rank > 0: a negative one was a full fine-tune */
        snprintf(err.msg, sizeof err.msg, "--lora-rank: expected 0 (off) or a positive rank, found %d", c.lora.rank);
        FAIL(ST_ERR_INPUT);
    }
    if (c.lora.rank == 0) {
        static const char *const LORA_ONLY[] = {"lora-alpha", "lora-dropout", "lora-targets", "lora-base-precision"};
        for (int i = 0; i < 4; i++)
            if (args_find(specs, n, LORA_ONLY[i])->seen) {
                snprintf(err.msg, sizeof err.msg, "--%s: expected --lora-rank > 0 with it, found no --lora-rank", LORA_ONLY[i]);
                FAIL(ST_ERR_INPUT);
            }
    } else {
        /* <= 0 was replaced by r silently (a value past a float's range is refused by the parser) */
        if (args_find(specs, n, "lora-alpha")->seen && !(lora_alpha > 0)) {
            snprintf(err.msg, sizeof err.msg, "--lora-alpha: expected a positive number (not given: alpha = r), found %g",
                     lora_alpha);
            FAIL(ST_ERR_INPUT);
        }
        c.lora.alpha = args_find(specs, n, "lora-alpha")->seen ? lora_alpha : (float)c.lora.rank;
        /* not given: the default; given empty ('') is refused by lora_parse_targets (was the default) */
        if (!args_find(specs, n, "lora-targets")->seen)
            snprintf(lora_targets, sizeof lora_targets, "%s", c.model.arch == ARCH_LLAMA ? "q,v" : "q,k,v");
        if ((st = lora_parse_targets(lora_targets, &c.model, &c.lora.targets, &err)) != ST_OK) FAIL(st);
        if (strcmp(lora_base_prec, "fp32") && strcmp(lora_base_prec, "bf16")) {
            snprintf(err.msg, sizeof err.msg, "--lora-base-precision: expected fp32 or bf16, found '%s'", lora_base_prec);
            FAIL(ST_ERR_INPUT);
        }
        c.lora.base_bf16 = !strcmp(lora_base_prec, "bf16");
    }
    if ((st = optim_parse_kind(optimizer, &c.optim.kind, &err)) != ST_OK) FAIL(st);
    OptimConfig od = optim_default_config(c.optim.kind);
    /* -1 (the documented "not given") takes the optimizer's default; any other value is the
     * user's, range-checked by train_run (a negative one used to become the default silently). */
    c.optim.beta1 = beta1 != -1 ? beta1 : od.beta1;
    c.optim.beta2 = beta2 != -1 ? beta2 : od.beta2;
    c.optim.eps = eps != -1 ? eps : od.eps;
    c.optim.weight_decay = wd != -1 ? wd : od.weight_decay;
    c.optim.momentum = momentum != -1 ? momentum : od.momentum;
    c.optim.muon_lr = muon_lr != -1 ? muon_lr : od.muon_lr;
    c.optim.muon_momentum = muon_mom != -1 ? muon_mom : od.muon_momentum;
    c.optim.shampoo_block = sh_block != ARG_UNSET_INT ? sh_block : od.shampoo_block;
    c.optim.precond_every = sh_every != ARG_UNSET_INT ? sh_every : od.precond_every;
    c.optim.shampoo_eps = sh_eps != -1 ? sh_eps : od.shampoo_eps;
    c.optim.hess_every = hess_every != ARG_UNSET_INT ? hess_every : od.hess_every;
    c.optim.sophia_gamma = gamma != -1 ? gamma : od.sophia_gamma;
    if ((st = sched_parse_kind(schedule, &c.sched.kind, &err)) != ST_OK) FAIL(st);
    /* A decaying schedule below the default --min-lr: the message says the default is at fault (the
     * user gave --lr only), not "--min-lr ... found 6e-05" for a flag never given. */
    if (c.sched.kind != SCHED_CONSTANT && !args_find(specs, n, "min-lr")->seen && c.sched.lr >= 0 &&
        c.sched.min_lr > c.sched.lr) {
        /* lr 0 (no updates: test_lora_train's measurement) takes --min-lr 0, not "in [0, 0]" */
        char range[64];
        if (c.sched.lr == 0) snprintf(range, sizeof range, "--min-lr 0");
        else snprintf(range, sizeof range, "--min-lr in [0, %g]", c.sched.lr);
        snprintf(err.msg, sizeof err.msg, "--lr %g: expected a value >= the default --min-lr %g that --schedule %s decays "
                 "to, found a smaller one; give %s (or --schedule constant)", c.sched.lr, c.sched.min_lr, schedule, range);
        FAIL(ST_ERR_INPUT);
    }
    if (health_policy_parse(spike_policy, &c.health.policy) != 0) {
        snprintf(err.msg, sizeof err.msg, "--spike-policy: expected log, skip or rollback, found '%s'", spike_policy);
        FAIL(ST_ERR_INPUT);
    }
    if (!strcmp(precision, "bf16")) c.bf16 = 1;
    else if (!strcmp(precision, "fp16")) c.fp16 = 1;
    else if (strcmp(precision, "fp32")) {
        snprintf(err.msg, sizeof err.msg, "--precision: expected fp32, bf16 or fp16, found '%s'", precision);
        FAIL(ST_ERR_INPUT);
    }
    if (!(c.loss_scale > 0) || c.loss_scale_window < 1) {
        snprintf(err.msg, sizeof err.msg, "--loss-scale / --loss-scale-window: expected > 0 and >= 1, found %g and %d",
                 c.loss_scale, c.loss_scale_window);
        FAIL(ST_ERR_INPUT);
    }
    if (!strcmp(recompute, "none")) c.recompute = RECOMPUTE_NONE;
    else if (!strcmp(recompute, "selective")) c.recompute = RECOMPUTE_SELECTIVE;
    else if (!strcmp(recompute, "full")) c.recompute = RECOMPUTE_FULL;
    else {
        snprintf(err.msg, sizeof err.msg, "--recompute: expected none, selective or full, found '%s'", recompute);
        FAIL(ST_ERR_INPUT);
    }
    if ((st = sched_parse_shape(shape, &c.sched.decay_shape, &err)) != ST_OK) FAIL(st);
    if (batch_tokens < 0) { /* was ignored as 0 */
        snprintf(err.msg, sizeof err.msg, "--batch-tokens: expected a positive token count (0: unused), found %ld",
                 batch_tokens);
        FAIL(ST_ERR_INPUT);
    }
    if (!(peak_gflops >= 0)) { /* was measured as if 0 */
        snprintf(err.msg, sizeof err.msg, "--peak-gflops: expected a positive GFLOP/s (0: measured), found %g", peak_gflops);
        FAIL(ST_ERR_INPUT);
    }
    if (batch_tokens > 0) {
        long per = (long)c.micro_batch * c.seq_len;
        if (per <= 0 || batch_tokens % per != 0) {
            snprintf(err.msg, sizeof err.msg,
                     "--batch-tokens %ld: expected a multiple of --micro-batch x --seq-len = %ld", batch_tokens, per);
            FAIL(ST_ERR_INPUT);
        }
        if (args_find(specs, n, "grad-accum")->seen && c.grad_accum != batch_tokens / per) {
            snprintf(err.msg, sizeof err.msg, "--batch-tokens %ld implies --grad-accum %ld, but --grad-accum %d was given",
                     batch_tokens, batch_tokens / per, c.grad_accum);
            FAIL(ST_ERR_INPUT);
        }
        if (batch_tokens / per > TRAIN_MAX_GRAD_ACCUM) {
            snprintf(err.msg, sizeof err.msg, "--batch-tokens %ld: expected at most %d micro-batches of --micro-batch x "
                     "--seq-len = %ld tokens per step (--grad-accum 1..%d), found %ld", batch_tokens,
                     TRAIN_MAX_GRAD_ACCUM, per, TRAIN_MAX_GRAD_ACCUM, batch_tokens / per);
            FAIL(ST_ERR_INPUT);
        }
        c.grad_accum = (int)(batch_tokens / per);
    }
    if (c.grad_accum > TRAIN_MAX_GRAD_ACCUM) { /* its batches were allocated: "out of memory" */
        snprintf(err.msg, sizeof err.msg, "--grad-accum: expected 1..%d micro-batches per step, found %d",
                 TRAIN_MAX_GRAD_ACCUM, c.grad_accum);
        FAIL(ST_ERR_INPUT);
    }
    c.peak_flops = peak_gflops * 1e9;
    if (c.remeasure_peak && peak_gflops > 0) {
        snprintf(err.msg, sizeof err.msg, "--remeasure-peak: expected no --peak-gflops (a given peak is not measured), "
                 "found --peak-gflops %g", peak_gflops);
        FAIL(ST_ERR_INPUT);
    }
    hw_peak_cache_path(c.peak_cache, sizeof c.peak_cache);
    if (hardware[0]) {
        if ((st = hw_resolve(&c.hw, hardware, &err)) != ST_OK) FAIL(st);
        c.have_hw = 1;
    }
    if ((st = refuse_inert(specs, n, &c, comm, &err)) != ST_OK) FAIL(st);
    if (c.ckpt_dir[0] && (st = check_writable_dir("ckpt-dir", c.ckpt_dir, &err)) != ST_OK) FAIL(st);
    if (c.out_dir[0] && (st = check_writable_dir("out", c.out_dir, &err)) != ST_OK) FAIL(st);
    if ((st = cli_faults_from_env(&c.faults, &err)) != ST_OK) FAIL(st); /* the tests' ST_*_TEST variables */
    /* a device that cannot open fails here, before the bundled corpus is prepared */
    if ((st = train_open_device(&c, &err)) != ST_OK) FAIL(st);
    if (!c.data[0] && (st = bundled_corpus(&c, comm, &err)) != ST_OK) FAIL(st);
    if (c.tokenizer[0]) {
        Tokenizer *tk = NULL;
        if ((st = cli_load_tokenizer(c.tokenizer, tok_dir, &tk, &err)) != ST_OK) {
            err_prefix(&err, "--tokenizer %s", c.tokenizer);
            FAIL(st);
        }
        c.tokenizer_hash = tokenizer_hash(tk);
        if (!args_find(specs, n, "vocab")->seen) c.model.vocab = (int)tokenizer_vocab_size(tk);
        sample_tk = tk; /* kept to decode --sample-every samples */
    }
    if (c.sample_every < 0 || c.sample_tokens < 1) {
        tokenizer_free(sample_tk);
        snprintf(err.msg, sizeof err.msg, "--sample-every / --sample-tokens: expected >= 0 and >= 1, found %d and %d",
                 c.sample_every, c.sample_tokens);
        FAIL(ST_ERR_INPUT);
    }
    c.sample_tokenizer = sample_tk;
    a->cfg = c;
    a->cfg.sample_tokenizer = sample_tk;
    a->sample_tk = sample_tk;
    args_join_quoted(a->joined, sizeof a->joined, "scaletrain train", argc, argv);
    a->cfg.argv_joined = a->joined;
    return ST_OK;
#undef FAIL
}

Status train_args_parse(int argc, char **argv, const Comm *comm, TrainArgs *a, Err *e) {
    return train_args_impl(argc, argv, comm, a, NULL, e);
}

int train_args_option(const char *name) {
    static TrainArgs scratch;
    TrainOptionTable t;
    Err e;
    train_args_impl(0, NULL, NULL, &scratch, &t, &e);
    if (!strcmp(name, "config")) return -1; /* a file of options: not one option */
    for (int i = 0; i < t.n; i++)
        if (!strcmp(t.name[i], name)) return t.is_flag[i];
    return -1;
}

void train_args_free(TrainArgs *a) {
    tokenizer_free(a->sample_tk);
    a->sample_tk = NULL;
    a->cfg.sample_tokenizer = NULL;
}

/* An input error that is the same on every rank (a flag of the common command line, the grid, a
 * refusal the ranks agreed on: train_agree's and train_run's res.err_everywhere) is printed by rank
 * 0 alone, so a job of N ranks shows one line, not N copies. An input error that a rank found by
 * itself (a shard, a --config or --init-from file that only it could not read, its part of a
 * checkpoint, a flag only its command line has) is printed by that rank, named: `scaletrain train:
 * rank 1: ...`; before 2026-11-26 those were dropped on ranks other than 0 and the job hung in the
 * next collective without a word. Other failures print on the rank that saw them. */
static int train_fail(const Comm *comm, Status st, const char *msg, int everywhere) {
    if (st == ST_ERR_INPUT && comm && comm->world > 1 && comm->rank != 0) {
        if (everywhere) return (int)st;
        fprintf(stderr, "scaletrain train: rank %d: %s\n", comm->rank, msg);
        fflush(stderr);
        return (int)st;
    }
    return cli_fail("train", st, msg);
}

int cmd_train_comm(int argc, char **argv, Comm *comm) {
    static TrainArgs a; /* large (paths); one per process */
    Err err = {0};
    Status st = train_args_parse(argc, argv, comm, &a, &err);
    /* --help ends every rank: one whose command line alone has it (MPMD, a --config file) would
     * otherwise leave the others waiting in the agreement below. */
    int64_t help = st == ST_OK && a.help;
    if (comm && comm->world > 1) {
        Err he;
        if (comm_allreduce_i64(comm, &help, 1, COMM_MAX, &he) != ST_OK) return cli_fail("train", he.status, he.msg);
    }
    if (help) return 0;
    /* Usually the same command line on every rank, but a --config file or a path may differ
     * between nodes: agreed on, so a rank's own refusal is printed and no rank waits alone. */
    int everywhere = 1;
    st = train_agree(comm, st, "command line", &err, &everywhere);
    if (st != ST_OK) return train_fail(comm, st, err.msg, everywhere);
    TrainConfig c = a.cfg;
    c.argv_joined = a.joined;
    c.handle_signals = 1;
    c.comm = comm;
    TrainResult res;
    st = train_run(&c, &res, &err);
    train_args_free(&a);
    if (st != ST_OK) {
        int rc = train_fail(comm, st, err.msg, res.err_everywhere);
        /* A failure only some ranks see would leave the others waiting in a collective: end the
         * job. Input errors (grid, config hash, flags, data) are seen by every rank: plain exit. */
        if (comm && comm->world > 1 && st != ST_ERR_INPUT) comm_abort(comm, rc, err.msg);
        return rc;
    }
    return 0;
}
