#!/usr/bin/env python3
# tensorboard_readback.py - reads kda.c's TensorBoard event files with the `tensorboard` PyPI
# package (its EventAccumulator, what TensorBoard's UI uses) and prints every scalar, so the
# files are checked by TensorBoard itself and not only by kda.c's own reader.
#
#   python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard
#   /tmp/tbvenv/bin/python tools/reference/tensorboard_readback.py TB_DIR [--expect-tags T1,T2]
#
# Exit status 1 when no scalars are found or an expected tag is missing.
import argparse
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--expect-tags", default="lm loss,learning-rate,grad-norm")
    a = ap.parse_args()
    acc = EventAccumulator(a.dir)
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for t in tags:
        for e in acc.Scalars(t):
            print(f"{t}\tstep {e.step}\twall {e.wall_time:.3f}\tvalue {e.value:.6g}")
    missing = [t for t in a.expect_tags.split(",") if t and t not in tags]
    if not tags or missing:
        print(f"missing tags: {missing or 'all'}", file=sys.stderr)
        return 1
    print(f"{len(tags)} tags read by tensorboard's EventAccumulator", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
