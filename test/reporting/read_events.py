"""Oracle for test_reporting_tensorboard: loads a TensorBoard log directory with the tensorboard
package's EventAccumulator and writes every scalar (step, value, wall_time) per tag as JSON.

usage: read_events.py LOG_DIR OUT_JSON
"""
import json
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as error:
    print(f"{error.name or error} is not installed for python3: run scripts/install-deps.sh")
    sys.exit(3)


def main():
    log_dir, out = sys.argv[1], sys.argv[2]
    acc = event_accumulator.EventAccumulator(log_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    answer = {
        "file_version": getattr(acc, "file_version", None),
        "scalars": {
            tag: [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]
        },
    }
    with open(out, "w") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main()
