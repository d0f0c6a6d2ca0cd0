#!/usr/bin/env python3
"""Writes a large JSON Lines corpus for the prepare benchmark (bench/prepare/prepare_scale.sh).

Documents are the speeches of Tiny Shakespeare (data/tinyshakespeare/input.txt, split at blank
lines). Copy k of the corpus tags every speech with "[copy k] " (so copies are distinct documents),
shuffles them with a seeded generator, and repeats 1% of them (exact duplicates for dedup). Copies
go round-robin into FILES files corpus_NN.jsonl until SIZE bytes are written.
Usage: gen_corpus.py SOURCE_TXT OUT_DIR SIZE_BYTES [FILES]
"""
import json
import os
import random
import sys

src, out, size = sys.argv[1], sys.argv[2], int(float(sys.argv[3]))
nfiles = int(sys.argv[4]) if len(sys.argv) > 4 else 16
text = open(src, encoding="utf-8").read()
speeches = [s for s in text.split("\n\n") if s.strip()]
esc = [json.dumps(s, ensure_ascii=False)[1:-1] for s in speeches]  # the JSON string body
os.makedirs(out, exist_ok=True)
files = [open(os.path.join(out, "corpus_%02d.jsonl" % i), "w", encoding="utf-8") for i in range(nfiles)]
rng = random.Random(29)
written, k, docs, dups = 0, 0, 0, 0
while written < size:
    order = list(range(len(esc)))
    rng.shuffle(order)
    order += order[: len(order) // 100]  # 1% exact duplicates within the copy
    dups += len(order) // 100
    tag = "[copy %d] " % k
    chunk = "".join('{"text": "%s%s"}\n' % (tag, esc[i]) for i in order)
    files[k % nfiles].write(chunk)
    written += len(chunk.encode("utf-8"))
    docs += len(order)
    k += 1
for f in files:
    f.close()
print("gen_corpus: %d bytes, %d copies, %d documents (%d exact duplicates) in %d files of %s"
      % (written, k, docs, dups, nfiles, out))
