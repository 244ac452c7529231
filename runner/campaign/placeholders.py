"""`{run_dir}` and `{run_id}` in a variant's command, resume command, env and checkpoint glob.

Every run starts in the campaign folder, so two variants of an unmodified script that saves to a
fixed path (nanoGPT's `out/`, MNIST's `mnist_cnn.pt`) would overwrite each other. Writing
`--out_dir={run_dir}/out` and `checkpoint_glob = "{run_dir}/out/*.pt"` gives each run its own
folder. `{run_dir}` becomes `runs/<run-id>`, relative to the campaign folder (the run's working
directory), so globs stay relative. The run id is hashed from the text as written, before
expansion, so the placeholders never change an id. Plain replacement, not `str.format`: braces in
regexes or JSON arguments are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable


def run_dir_rel(run_id: str) -> str:
    return f"runs/{run_id}"


def expand(text: str, run_id: str) -> str:
    return text.replace("{run_dir}", run_dir_rel(run_id)).replace("{run_id}", run_id)


def expand_all(items: Iterable[str], run_id: str) -> list[str]:
    return [expand(x, run_id) for x in items]


def expand_opt(text: str | None, run_id: str) -> str | None:
    return None if text is None else expand(text, run_id)
