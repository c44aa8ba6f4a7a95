"""Oracle for test_export: reads an .npz archive with numpy and writes what it sees as JSON
({name: {"dtype", "shape", "values"}}, values flattened in C order).

usage: read_npz.py FILE OUT_JSON
"""
import json
import sys

try:
    import numpy as np
except ImportError as error:
    print(f"{error.name or error} is not installed for python3: run scripts/install-deps.sh")
    sys.exit(3)


def main():
    path, out = sys.argv[1], sys.argv[2]
    result = {}
    with np.load(path) as archive:
        for name in archive.files:
            array = archive[name]
            result[name] = {"dtype": array.dtype.str, "shape": list(array.shape),
                            "values": [v.item() for v in array.reshape(-1)]}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
