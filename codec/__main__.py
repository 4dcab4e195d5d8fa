"""``python -m codec``: the zipccl command line tool (see :mod:`codec.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
