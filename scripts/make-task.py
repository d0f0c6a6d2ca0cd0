#!/usr/bin/env python3
"""make-task.py — a synthetic supervised fine-tuning task as chat JSON Lines (docs/finetune.md §2).

Usage: python3 scripts/make-task.py TASK --out DIR [--train N] [--test N] [--seed S]
  TASK  add      "What is 123 + 45?" -> "168"   (two numbers below 10^D, --digits D, default 3)
        reverse  "Reverse: stone" -> "enots"    (3-7 lowercase letters)
        upper    "Upper: stone" -> "STONE"      (--letters L lowercase letters, default 4)
        copy     "Copy: stone" -> "stone"       (--letters L lowercase letters)
Writes DIR/train.jsonl (N conversations, default 4000, drawn with replacement: `prepare` drops the
repeats) and DIR/test.jsonl (held out: default 200 distinct prompts that appear nowhere in
train.jsonl), one {"prompt": ..., "response": ...} object per line,
what `scaletrain prepare --format chat` reads and `scaletrain eval --exact-match` scores.
Deterministic for a seed (Python's random.Random); standard library only.
"""
import argparse
import json
import os
import random
import string


def add_example(r, digits):
    a, b = r.randint(0, 10 ** digits - 1), r.randint(0, 10 ** digits - 1)
    return "What is %d + %d?" % (a, b), str(a + b)


def reverse_example(r, digits):
    w = "".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(3, 7)))
    return "Reverse: %s" % w, w[::-1]


def word(r, letters):
    return "".join(r.choice(string.ascii_lowercase) for _ in range(letters))


def upper_example(r, letters):
    w = word(r, letters)
    return "Upper: %s" % w, w.upper()


def copy_example(r, letters):
    w = word(r, letters)
    return "Copy: %s" % w, w


TASKS = {"add": add_example, "reverse": reverse_example, "upper": upper_example, "copy": copy_example}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task", choices=sorted(TASKS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--digits", type=int, default=3, help="add: digits of each number (1..9)")
    ap.add_argument("--letters", type=int, default=4, help="upper, copy: letters of each word (1..12)")
    a = ap.parse_args()
    if a.train < 1 or a.test < 1:
        ap.error("--train and --test: expected >= 1")
    if not 1 <= a.digits <= 9:
        ap.error("--digits: expected 1..9, found %d" % a.digits)
    if a.task == "add" and a.test > 10 ** (2 * a.digits) // 2:
        ap.error("--digits %d: only %d distinct prompts, expected at least twice --test"
                 % (a.digits, 10 ** (2 * a.digits)))
    if not 1 <= a.letters <= 12:
        ap.error("--letters: expected 1..12, found %d" % a.letters)
    if a.task in ("upper", "copy") and a.test > 26 ** a.letters // 2:
        ap.error("--letters %d: only %d distinct prompts, expected at least twice --test"
                 % (a.letters, 26 ** a.letters))
    r = random.Random(a.seed)
    make = TASKS[a.task]
    param = a.letters if a.task in ("upper", "copy") else a.digits
    test, seen = [], set()
    while len(test) < a.test:  # held-out prompts first, then training prompts that avoid them
        p, ans = make(r, param)
        if p not in seen:
            seen.add(p)
            test.append((p, ans))
    train, tries = [], 0
    while len(train) < a.train:
        p, ans = make(r, param)
        tries += 1
        if tries > 100 * a.train:
            ap.error("cannot draw %d training prompts disjoint from the held-out ones" % a.train)
        if p not in seen:
            train.append((p, ans))
    os.makedirs(a.out, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        with open(os.path.join(a.out, name + ".jsonl"), "w") as f:
            for p, ans in rows:
                f.write(json.dumps({"prompt": p, "response": ans}) + "\n")
    print("make-task: %s: %d train + %d held-out conversations in %s" % (a.task, len(train), len(test), a.out))


if __name__ == "__main__":
    main()
