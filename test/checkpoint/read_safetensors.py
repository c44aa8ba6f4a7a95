"""Oracle for test_checkpoint_safetensors: reads a safetensors file with the `safetensors` and
`numpy` packages and writes what they see as JSON; with --write, first writes a file of its own
for our reader to check.

usage: read_safetensors.py --read FILE OUT_JSON
       read_safetensors.py --write FILE OUT_JSON
"""
import json
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as error:
    print(f"{error.name or error} is not installed for python3: run scripts/install-deps.sh")
    sys.exit(3)


def main():
    mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "--write":
        save_file(
            {
                "a": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
                "b": np.array([1, -2, 3, 40], dtype=np.int64),
                "c": np.array(1.5, dtype=np.float32),
            },
            path,
            metadata={"who": "python"},
        )
        with open(out, "w") as f:
            json.dump({"written": path}, f)
        return
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    answer = {"metadata": metadata, "tensors": {}}
    for name, array in tensors.items():
        answer["tensors"][name] = {
            "dtype": str(array.dtype),
            "shape": list(array.shape),
            # float32 -> Python float is exact, and json writes the shortest round-trip repr.
            "values": [float(v) for v in array.reshape(-1)],
        }
    with open(out, "w") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main()
