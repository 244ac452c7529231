"""`python -m runner` is the `campaign` command (used where the console script is not on PATH)."""

import sys

from runner.cli import main

sys.exit(main())
