#!/usr/bin/env python3
# fetch_eval_data.py - the eight seed tasks' data in `kda eval --data DIR`'s layout
# (docs/eval.md "Data"): DIR/hf_datasets/<path>/<split> save_to_disk folders, the splits
# lm-eval 0.4 evaluates, from the Hugging Face hub (needs network) or from local JSONL exports.
#
#   python3 -m venv /tmp/dsvenv && /tmp/dsvenv/bin/pip install datasets
#   /tmp/dsvenv/bin/python tools/fetch_eval_data.py --out data/eval             (hub)
#   /tmp/dsvenv/bin/python tools/fetch_eval_data.py --out D --local SRC [--tasks piqa,race]
#       (SRC/<task>.jsonl[.gz] in the HF dataset's field layout; mmlu: SRC/mmlu.jsonl with a
#        "subject" field, written per subject)
#
# Prints one line per task and split written; exit status 1 when a task could not be fetched.
import argparse
import os
import sys

from datasets import load_dataset

# task -> (hub id, config, kda's folder under hf_datasets, lm-eval's split)
TASKS = {
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy", "ai2_arc/ARC-Easy", "test"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge", "ai2_arc/ARC-Challenge", "test"),
    "hellaswag": ("Rowan/hellaswag", None, "hellaswag/default", "validation"),
    "openbookqa": ("allenai/openbookqa", "main", "openbookqa/main", "test"),
    "piqa": ("baber/piqa", None, "piqa/plain_text", "validation"),
    "winogrande": ("allenai/winogrande", "winogrande_xl", "winogrande/winogrande_xl",
                   "validation"),
    "race": ("EleutherAI/race", "high", "race/high", "test"),
    "mmlu": ("hails/mmlu_no_train", "all", "hails/mmlu_no_train", "test"),
}


def load(task, local):
    hub, cfg, _, split = TASKS[task]
    if local:
        for ext in (".jsonl", ".jsonl.gz"):
            p = os.path.join(local, task + ext)
            if os.path.exists(p):
                return load_dataset("json", data_files=p, split="train")
        raise FileNotFoundError(f"{local}/{task}.jsonl[.gz]")
    return load_dataset(hub, cfg, split=split)


def save(ds, out, folder, split):
    path = os.path.join(out, "hf_datasets", folder, split)
    ds.save_to_disk(path)
    print(f"{path}: {len(ds)} rows")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--local", help="read SRC/<task>.jsonl instead of the hub")
    ap.add_argument("--tasks", default=",".join(TASKS))
    a = ap.parse_args()
    failed = 0
    for task in a.tasks.split(","):
        if task not in TASKS:
            print(f"{task}: unknown (known: {', '.join(TASKS)})", file=sys.stderr)
            failed = 1
            continue
        _, _, folder, split = TASKS[task]
        try:
            ds = load(task, a.local)
        except Exception as e:  # the hub unreachable, a missing file: name it and go on
            print(f"{task}: {e}", file=sys.stderr)
            failed = 1
            continue
        if task == "mmlu":  # one folder per subject, as kda reads hails/mmlu_no_train/<s>/test
            for subject in sorted(set(ds["subject"])):
                save(ds.filter(lambda r: r["subject"] == subject), a.out, f"{folder}/{subject}",
                     split)
        else:
            save(ds, a.out, folder, split)
    return failed


if __name__ == "__main__":
    sys.exit(main())
