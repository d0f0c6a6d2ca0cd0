/* test_train_inputs.c — a run never overwrites its own inputs, a resume trains on the files it
 * trained on, one --ckpt-dir has one writer, and a resealed state.json is still checked.
 *
 * Oracle: the real binary's exit status and its one stderr line, and the inputs' bytes (XXH3 of a
 * shard before and after; the checkpoint still resumes).
 *   outputs   --log naming the training shard, --out naming the checkpoint being resumed, --out
 *             naming the --init-from folder, --out naming a step_ folder of --ckpt-dir or another
 *             checkpoint folder (a copy holding state.json): exit 2,
 *             one line naming the flag; the shard's hash and the checkpoint unchanged (it resumes).
 *             Control: the same runs with the outputs elsewhere exit 0. A run without --resume into
 *             the --ckpt-dir holding checkpoints is refused naming one (control: --resume auto there
 *             resumes, below).
 *   data      a resume whose --data glob now matches a second shard is refused naming data_files;
 *             the same single shard spelled as a path instead of the glob resumes (0), and so does
 *             the changed glob with --override data (control: the override is what lets it).
 *   contents  a resume after the shard was prepared again in place (same size) is refused naming
 *             it (data_files' content fingerprints); control: a checkpoint without fingerprints (as
 *             written before them, resealed) resumes on the same shard.
 *   lock      with the test holding DIR/.lock (flock), `train --ckpt-dir DIR` is refused naming
 *             the holder's pid; released, the same command runs (control).
 *   state     a state.json whose step is set to -1 (then to 1e30) and resealed (checksum
 *             recomputed) is refused naming `step`; so are extra.batches -1 and 1e300 and
 *             extra.skipped_batches [2.5]; skipped_batches [3] and the untouched one resume (controls).
 *   rewrite   a shard rewritten in place during a run (same size, every id 0xFFFF, past the 257
 *             of the vocabulary) stops the run with exit 2 and one line naming --data and the id
 *             (the ids were checked when it opened; read on, 0xFFFF would index past the embedding
 *             table). Control: the same run on an untouched copy finishes (exit 0). */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"
#include "core/fileio.h"
#include "testutil.h"

#define BIN ST_BINARY_DIR "/scaletrain"
#define DIR ST_BINARY_DIR "/test_train_inputs"
#define T "--layers 2 --heads 2 --channels 32 --vocab 257 --max-seq-len 32 --seq-len 32 --micro-batch 2 --threads 1 --quiet"


static unsigned long long hash_file(const char *path) {
    char *t;
    size_t n;
    Err e;
    if (file_read_all(path, &t, &n, &e) != ST_OK) return 0;
    unsigned long long h = XXH3_64bits(t, n);
    free(t);
    return h;
}

/* Refused with exit 2, one line containing want; or run with exit 0. */
static void refused(const char *name, const char *args, const char *want) { tu_refused_in(DIR, BIN, name, args, want); }
static void ran(const char *name, const char *args) { tu_ran_in(DIR, BIN, name, args); }

static void outputs(void) {
    char a[2048];
    unsigned long long h0 = hash_file(DIR "/sh/train_000000.bin");
    refused("--log naming the training shard is refused", "train --data sh/train_000000.bin " T " --steps 2 --log "
            "sh/train_000000.bin", "--log sh/train_000000.bin: expected a file that is not one of the run's inputs");
    tu_check(h0 && hash_file(DIR "/sh/train_000000.bin") == h0, "the shard is unchanged", "xxh3 %016llx", h0);
    ran("a checkpoint at step 6", "train --data sh/train_000000.bin " T " --steps 6 --ckpt-dir ck --ckpt-every 3");
    /* without --resume it started from step 0 over those checkpoints (replaced, or removed by retention) */
    refused("a run without --resume into a --ckpt-dir holding checkpoints is refused", "train --data "
            "sh/train_000000.bin " T " --steps 6 --ckpt-dir ck", "--ckpt-dir ck: expected a folder without checkpoints "
            "for a run that does not resume, found ck/");
    refused("--out naming the checkpoint it resumes is refused", "train --data sh/train_000000.bin " T " --steps 9 "
            "--ckpt-dir ck --resume auto --out ck/step_00000006", "--out ck/step_00000006: expected a folder other than "
            "the checkpoint it resumes");
    refused("--out naming a step_ folder of --ckpt-dir is refused", "train --data sh/train_000000.bin " T " --steps 9 "
            "--ckpt-dir ck --resume auto --out ck/step_00000009", "expected a folder outside --ckpt-dir ck's checkpoints");
    system("rm -rf " DIR "/ckcopy && cp -r " DIR "/ck/step_00000006 " DIR "/ckcopy");
    refused("--out naming another checkpoint folder is refused", "train --data sh/train_000000.bin " T " --steps 2 "
            "--out ckcopy", "--out ckcopy: expected a folder for the weights (model.safetensors, config.json) of its own, "
            "found a checkpoint (ckcopy/state.json)");
    ran("control: that checkpoint still resumes", "train --data sh/train_000000.bin " T " --steps 7 --resume ckcopy");
    ran("base weights", "train --data sh/train_000000.bin " T " --steps 2 --out base");
    snprintf(a, sizeof a, "train --data sh/train_000000.bin --init-from base --steps 2 --threads 1 --seq-len 32 "
             "--micro-batch 2 --quiet --out base");
    refused("--out naming the --init-from folder is refused", a, "--out base: expected a folder other than the weights "
            "it starts from");
    ran("control: the checkpoint still resumes, --out elsewhere, --log elsewhere",
        "train --data sh/train_000000.bin " T " --steps 9 --ckpt-dir ck --resume ck/step_00000006 --out out9 --log l.jsonl");
    ran("control: --init-from base to another folder", "train --data sh/train_000000.bin --init-from base --steps 2 "
        "--threads 1 --seq-len 32 --micro-batch 2 --quiet --out base2");
}

static void data(void) {
    system("mkdir -p " DIR "/dd && cp " DIR "/sh/train_000000.bin " DIR "/sh/manifest.json " DIR "/dd/");
    ran("a run on 'dd/train_*.bin' stops at 6", "train --data 'dd/train_*.bin' " T " --steps 12 --stop-after 6 "
        "--ckpt-dir ckd");
    system("cp " DIR "/sh/val_000000.bin " DIR "/dd/train_000001.bin");
    refused("its resume with the glob now matching another shard is refused", "train --data 'dd/train_*.bin' " T
            " --steps 12 --ckpt-dir ckd --resume auto", "config field data_files (a trajectory field) changed");
    ran("control: with --override data it resumes", "train --data 'dd/train_*.bin' " T " --steps 7 --ckpt-dir ckd2 "
        "--resume ckd/step_00000006 --override data");
    ran("the same one shard named as a path, not the glob, resumes", "train --data dd/train_000000.bin " T
        " --steps 12 --ckpt-dir ckd --resume auto");
}

/* src's state.json with data_files' fingerprints removed (the [name, bytes] entries of a checkpoint
 * written before them), resealed, as the checkpoint folder dst. */
static int strip_fingerprints(const char *src, const char *dst) {
    char cmd[600], path[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s && mkdir -p %s/%s && cp -r %s/%s/. %s/%s/", DIR, dst, DIR, dst, DIR, src, DIR, dst);
    if (system(cmd) != 0) return 0;
    snprintf(path, sizeof path, "%s/%s/state.json", DIR, dst);
    char *t = tu_slurp(path);
    cJSON *o = t ? cJSON_Parse(t) : NULL, *set;
    free(t);
    cJSON *files = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "config"), "data_files");
    int n = 0;
    cJSON_ArrayForEach(set, files) {
        cJSON *f;
        cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(set, "files")) {
            n += cJSON_GetArraySize(f) == 3;
            cJSON_DeleteItemFromArray(f, 2);
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(o, "state_checksum");
    char *text = n ? cJSON_Print(o) : NULL, *sealed = text ? ckpt_state_seal(text) : NULL;
    cJSON_Delete(o);
    free(text);
    FILE *fp = sealed ? fopen(path, "w") : NULL;
    int ok = fp && fputs(sealed, fp) >= 0;
    if (fp) fclose(fp);
    free(sealed);
    return ok;
}

/* The shard at path prepared again: the same size and header, each byte id b < 256 now b + 1 mod
 * 256 (another corpus order or seed changes every block alike). */
static int reprepare(const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    unsigned char *b = n > 1024 ? malloc((size_t)n) : NULL;
    int ok = b && fseek(f, 0, SEEK_SET) == 0 && fread(b, 1, (size_t)n, f) == (size_t)n;
    for (long i = 1024; ok && i + 1 < n; i += 2) {
        unsigned id = b[i] | (unsigned)b[i + 1] << 8;
        if (id < 256) id = (id + 1) % 256, b[i] = (unsigned char)id, b[i + 1] = 0;
    }
    ok = ok && fseek(f, 0, SEEK_SET) == 0 && fwrite(b, 1, (size_t)n, f) == (size_t)n;
    free(b);
    return fclose(f) == 0 && ok;
}

/* A resume after the shard was prepared again in place (same size: the names and sizes match) is
 * refused naming it, by the content fingerprint in data_files; a checkpoint written before the
 * fingerprints (entries [name, bytes]) resumes on the same shard (control: an older checkpoint is
 * not refused for lacking them). */
static void contents(void) {
    system("mkdir -p " DIR "/de && cp " DIR "/sh/train_000000.bin " DIR "/de/");
    ran("a run on de/train_000000.bin stops at 6", "train --data de/train_000000.bin " T " --steps 12 --stop-after 6 "
        "--ckpt-dir ckde");
    int ok = strip_fingerprints("ckde/step_00000006", "ckdo/step_00000006");
    tu_check(ok, "the checkpoint's data_files without fingerprints, resealed", "%d", ok);
    ran("control: a checkpoint without fingerprints resumes on the same shard", "train --data de/train_000000.bin " T
        " --steps 7 --resume ckdo/step_00000006");
    ok = reprepare(DIR "/de/train_000000.bin");
    tu_check(ok, "the shard prepared again in place (same size)", "%d", ok);
    refused("a resume on the shard prepared again is refused naming it", "train --data de/train_000000.bin " T
            " --steps 12 --ckpt-dir ckde --resume auto", "config field data_files (a trajectory field) changed: "
            "train_000000.bin's contents differ from the checkpoint's");
}

static void lock(void) {
    system("mkdir -p " DIR "/lk");
    int fd = open(DIR "/lk/.lock", O_RDWR | O_CREAT, 0644);
    int held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
    char want[128];
    snprintf(want, sizeof want, "--ckpt-dir lk: expected a folder no other run is writing, found it in use by process");
    if (fd >= 0) {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) held = 0;
    }
    tu_check(held, "the test holds lk/.lock", "fd %d", fd);
    char w2[160];
    snprintf(w2, sizeof w2, "%s %ld", want, (long)getpid());
    refused("a --ckpt-dir another process holds is refused, naming its pid",
            "train --data sh/train_000000.bin " T " --steps 2 --ckpt-dir lk --ckpt-every 1", w2);
    if (fd >= 0) close(fd);
    ran("control: released, the same run writes its checkpoints",
        "train --data sh/train_000000.bin " T " --steps 2 --ckpt-dir lk --ckpt-every 1");
}

/* ck/step_00000006's state.json with `key` (step, or a member of extra) set to v (a number, or
 * with `array` a one-number array), resealed, into ckv/step_00000006. */
static int reseal_key(const char *key, double v, int array) {
    system("rm -rf " DIR "/ckv && mkdir -p " DIR "/ckv && cp -r " DIR "/ck/step_00000006 " DIR "/ckv/");
    char *t = tu_slurp(DIR "/ckv/step_00000006/state.json");
    cJSON *o = t ? cJSON_Parse(t) : NULL;
    free(t);
    if (!o) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(o, "state_checksum");
    cJSON *in = strcmp(key, "step") ? cJSON_GetObjectItemCaseSensitive(o, "extra") : o;
    cJSON *val = cJSON_CreateNumber(v);
    if (array) {
        cJSON *a = cJSON_CreateArray();
        cJSON_AddItemToArray(a, val);
        val = a;
    }
    int had = in && cJSON_GetObjectItemCaseSensitive(in, key) && cJSON_ReplaceItemInObjectCaseSensitive(in, key, val);
    if (!had) cJSON_Delete(val);
    char *text = cJSON_Print(o), *sealed = text && had ? ckpt_state_seal(text) : NULL;
    cJSON_Delete(o);
    free(text);
    FILE *f = sealed ? fopen(DIR "/ckv/step_00000006/state.json", "w") : NULL;
    int ok = f && fputs(sealed, f) >= 0;
    if (f) fclose(f);
    free(sealed);
    return ok;
}

static int reseal(double v) { return reseal_key("step", v, 0); }

static void state(void) {
    int ok = reseal(-1);
    refused("a resealed state.json with step -1 is refused", "train --data sh/train_000000.bin " T " --steps 12 "
            "--resume ckv/step_00000006", "step: expected a whole number in [0, 9007199254740992], found -1");
    ok &= reseal(1e30);
    refused("a resealed state.json with step 1e30 is refused", "train --data sh/train_000000.bin " T " --steps 12 "
            "--resume ckv/step_00000006", "step: expected a whole number in [0, 9007199254740992], found 1e+30");
    /* the batches consumed and the skipped ones (extra): taken as written until 2026-11-30 (1e300
     * cast to a long; -1 put the loader's batch counter behind the step) */
    ok &= reseal_key("batches", -1, 0);
    refused("a resealed state.json with extra.batches -1 is refused", "train --data sh/train_000000.bin " T " --steps 12 "
            "--resume ckv/step_00000006",
            "extra.batches: expected a whole number in [6 (the step), 9007199254740992], found -1");
    ok &= reseal_key("batches", 1e300, 0);
    refused("a resealed state.json with extra.batches 1e300 is refused", "train --data sh/train_000000.bin " T
            " --steps 12 --resume ckv/step_00000006",
            "extra.batches: expected a whole number in [6 (the step), 9007199254740992], found 1e+300");
    ok &= reseal_key("skipped_batches", 2.5, 1);
    refused("a resealed state.json with extra.skipped_batches [2.5] is refused", "train --data sh/train_000000.bin " T
            " --steps 12 --resume ckv/step_00000006",
            "extra.skipped_batches: expected an array of whole numbers in [0, 6] (the batches consumed), found 2.5");
    ok &= reseal_key("skipped_batches", 3, 1);
    ran("control: extra.skipped_batches [3] (a batch this run could have skipped) resumes",
        "train --data sh/train_000000.bin " T " --steps 8 --resume ckv/step_00000006");
    ok &= reseal(6);
    tu_check(ok, "state.json resealed seven times", "%d", ok);
    ran("control: resealed with its own step 6 it resumes (the reseal itself is sound)",
        "train --data sh/train_000000.bin " T " --steps 8 --resume ckv/step_00000006");
}

static void rewrite(void) {
    system("mkdir -p " DIR "/rw && cp " DIR "/sh/train_000000.bin " DIR "/rw/a.bin && cp " DIR "/sh/train_000000.bin "
           DIR "/rw/b.bin && head -c 1000000 /dev/zero | tr '\\000' '\\377' > " DIR "/rw/ff.bin");
    char cmd[2048], err[1024];
    snprintf(cmd, sizeof cmd, "cd %s && (%s train --data rw/a.bin " T " --steps 200000 2>stderr.txt & p=$!; sleep 1; "
             "dd if=rw/ff.bin of=rw/a.bin bs=1024 seek=1 conv=notrunc status=none; wait $p)", DIR, BIN);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *t = tu_slurp(DIR "/stderr.txt");
    int lines = 0;
    for (const char *p = t; p && *p; p++) lines += *p == '\n';
    snprintf(err, sizeof err, "%s", t ? t : "");
    free(t);
    tu_check(rc == 2 && lines == 1 && strstr(err, "--data rw/a.bin: token id 65535") &&
                 strstr(err, "was a shard rewritten during the run?"),
             "a shard rewritten in place during the run stops it with one line", "exit %d, %d line(s): %s", rc, lines, err);
    ran("control: the same run on an untouched copy finishes", "train --data rw/b.bin " T " --steps 50");
}

int main(void) {
    if (system("rm -rf " DIR " && mkdir -p " DIR " && cd " DIR " && " BIN " prepare --out sh --tokenizer bytes --separator "
               "'' --val-fraction 0.1 --quiet " ST_SOURCE_DIR "/data/tinyshakespeare/input.txt >/dev/null 2>&1") != 0) {
        tu_check(0, "prepare the shards", "failed");
        return tu_exit();
    }
    outputs();
    data();
    contents();
    lock();
    state();
    rewrite();
    return tu_exit();
}
