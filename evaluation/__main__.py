"""`python -m evaluation FILE... --out DIR`: the LoCoMo harness from the command line."""

from __future__ import annotations

import sys

from evaluation.harness import main

if __name__ == "__main__":
    sys.exit(main())
