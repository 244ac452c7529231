"""Shared test set-up. Area-specific fixtures live in each area's own helper module
(tests/helpers_<area>.py) so the areas can grow without touching each other."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Tests never reach a real GPU from CI; a test that wants NVML hands the layer a recorded backend.
os.environ.setdefault("PYTHONUNBUFFERED", "1")
