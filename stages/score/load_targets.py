"""Read one step's targets with our `scicode.parse.parse` under another interpreter.

Usage: python load_targets.py <targets.h5> <step_id> <count>; writes a pickled list of per-test
pickles to stdout (so the engine serves pickles made by the interpreter that will load them).
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> None:
    path, step_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime"))
    from scicode.parse.parse import process_hdf5_to_tuple

    values = process_hdf5_to_tuple(step_id, count, path)
    sys.stdout.buffer.write(pickle.dumps([pickle.dumps(value, protocol=4) for value in values], protocol=4))


if __name__ == "__main__":
    main()
