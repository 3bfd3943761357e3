"""``python -m pywave``: the command line (:mod:`pywave.entry.cli`)."""

import sys

from .entry.cli import main

if __name__ == "__main__":
    sys.exit(main())
