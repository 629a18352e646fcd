"""``python -m training``: see training/cli.py."""

import sys

from training.cli import main

if __name__ == "__main__":
    sys.exit(main())
