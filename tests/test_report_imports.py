"""The report side is safe for the console: building a report imports neither torch nor Textual."""

from __future__ import annotations

import json
import subprocess
import sys


def test_report_modules_import_neither_torch_nor_textual():
    code = (
        "import json, sys; import runner.closing.report, runner.closing.manifest, runner.closing.pilot, runner.cli.report_cmds; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'textual'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == []
