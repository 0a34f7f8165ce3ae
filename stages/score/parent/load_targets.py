"""Read one step's targets with our `scicode.parse.parse` under another interpreter.

Usage: python load_targets.py <targets.h5> <step_id> <count>; writes a pickled list of per-test
pickles to stdout (so the engine serves pickles made by the interpreter that will load them). Run by path
(standard library and h5py/numpy only): our `scicode` package is `../shared/runtime/`.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> None:
    path, step_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    score_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(score_dir, "shared", "runtime"))
    from scicode.parse.parse import process_hdf5_to_tuple

    values = process_hdf5_to_tuple(step_id, count, path)
    sys.stdout.buffer.write(pickle.dumps([pickle.dumps(value, protocol=4) for value in values], protocol=4))


if __name__ == "__main__":
    main()
