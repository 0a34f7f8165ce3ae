"""`python -m stages.targets [data_dir]`: derive the targets and print the record's counts."""

import sys

from stages.targets.derive import main

sys.exit(main(sys.argv[1:]))
