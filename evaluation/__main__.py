"""`python -m strata.evaluation FILE... --out DIR`: the LoCoMo harness from the command line."""

from __future__ import annotations

import sys

from strata.evaluation.harness import main

if __name__ == "__main__":
    sys.exit(main())
