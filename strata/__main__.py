"""`python -m strata` runs the `strata` command."""

from strata.cli import main

raise SystemExit(main())
