"""TensorBoard's own reading of a run folder, for tests/integration/validation_run_test.cc.

Usage: tensorboard_reader.py RUN_DIR

Prints one JSON object: {"file_version": the first event's file_version of each event file,
"scalars": {tag: [[step, value], ...]}} as TensorBoard's EventAccumulator loads them (which checks
each record's masked CRC-32C and parses each Event with the real protobuf messages). Values are the
float32 simple_values widened to Python floats.
"""
import glob
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import event_file_loader


def main():
    run_dir = sys.argv[1]
    versions = []
    for path in sorted(glob.glob(os.path.join(run_dir, "*tfevents*"))):
        first = next(iter(event_file_loader.LegacyEventFileLoader(path).Load()))
        versions.append(first.file_version)
    accumulator = event_accumulator.EventAccumulator(
        run_dir, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    scalars = {}
    for tag in accumulator.Tags()["scalars"]:
        scalars[tag] = [[e.step, e.value] for e in accumulator.Scalars(tag)]
    json.dump({"file_version": versions, "scalars": scalars}, sys.stdout)


if __name__ == "__main__":
    main()
