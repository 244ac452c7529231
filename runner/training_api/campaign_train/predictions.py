"""A run's deliverables: predictions on the fixed evaluation split, an error analysis, the final
checkpoint.

The brief asks a campaign to end with predictions, an error analysis and reloadable artifacts; the
deliverables check (`campaign verify`) looks for exactly the names in `DEFAULT_EXPECTS` unless a
variant lists its own `expects`. Every file is written atomically, so a run killed while writing
never leaves a half file that looks like a deliverable.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from campaign_train import metrics
from campaign_train.atomic import write_text_atomic

PREDICTIONS_FILE = "predictions.jsonl"
ERROR_ANALYSIS_FILE = "error_analysis.json"
FINAL_CHECKPOINT = "checkpoints/final.pt"
DEFAULT_EXPECTS = (PREDICTIONS_FILE, ERROR_ANALYSIS_FILE, FINAL_CHECKPOINT)


def _atomic_write(path: Path, text: str) -> None:
    write_text_atomic(path, text)


def _plain(value: Any) -> Any:
    """Tensors and NumPy values as plain JSON values (without importing either)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return value


def write_predictions(rows: Iterable[dict[str, Any]], run_dir: Path | None = None) -> Path:
    """One JSON object a line (e.g. {"id", "label", "prediction", "correct"}) → `predictions.jsonl`."""
    path = (run_dir or metrics.run_dir()) / PREDICTIONS_FILE
    lines = []
    for row in rows:
        lines.append(json.dumps({k: _plain(v) for k, v in row.items()}, separators=(",", ":")) + "\n")
    if not lines:
        raise ValueError("no predictions to write: an empty predictions file is not a deliverable")
    _atomic_write(path, "".join(lines))
    return path


def error_analysis(
    labels: Sequence[Any], predictions: Sequence[Any], buckets: Sequence[Any] | None = None, top_confusions: int = 5
) -> dict[str, Any]:
    """Accuracy, per-class and per-bucket error rates, the commonest confusions, and a summary."""
    labels = [_plain(x) for x in labels]
    predictions = [_plain(x) for x in predictions]
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    if not labels:
        raise ValueError("no examples to analyse")
    n = len(labels)
    errors = sum(1 for y, p in zip(labels, predictions) if y != p)

    def groups(keys: Sequence[Any]) -> dict[str, dict[str, Any]]:
        count: Counter = Counter()
        wrong: Counter = Counter()
        for k, y, p in zip(keys, labels, predictions):
            count[str(k)] += 1
            wrong[str(k)] += y != p
        return {
            k: {"count": count[k], "errors": wrong[k], "error_rate": round(wrong[k] / count[k], 4)}
            for k in sorted(count)
        }

    per_class = groups(labels)
    confusions: dict[tuple[str, str], int] = defaultdict(int)
    for y, p in zip(labels, predictions):
        if y != p:
            confusions[(str(y), str(p))] += 1
    top = sorted(confusions.items(), key=lambda kv: (-kv[1], kv[0]))[:top_confusions]
    result: dict[str, Any] = {
        "examples": n,
        "errors": errors,
        "accuracy": round(1 - errors / n, 4),
        "per_class": per_class,
        "top_confusions": [{"label": y, "predicted": p, "count": c} for (y, p), c in top],
    }
    if buckets is not None:
        if len(buckets) != n:
            raise ValueError(f"{len(buckets)} buckets for {n} examples")
        result["per_bucket"] = groups(buckets)
    result["summary"] = _summary(result)
    return result


def _summary(a: dict[str, Any]) -> list[str]:
    lines = [f"{a['errors']} errors in {a['examples']} examples (accuracy {a['accuracy']:.1%})."]
    worst = max(a["per_class"].items(), key=lambda kv: (kv[1]["error_rate"], kv[0]))
    best = min(a["per_class"].items(), key=lambda kv: (kv[1]["error_rate"], kv[0]))
    lines.append(
        f"Hardest class: {worst[0]} ({worst[1]['error_rate']:.1%} wrong); "
        f"easiest: {best[0]} ({best[1]['error_rate']:.1%} wrong)."
    )
    if a["top_confusions"]:
        c = a["top_confusions"][0]
        lines.append(f"Commonest confusion: {c['label']} taken for {c['predicted']} ({c['count']} times).")
    for name, b in (a.get("per_bucket") or {}).items():
        lines.append(f"Bucket {name}: {b['errors']}/{b['count']} wrong ({b['error_rate']:.1%}).")
    return lines


def write_error_analysis(
    labels: Sequence[Any],
    predictions: Sequence[Any],
    buckets: Sequence[Any] | None = None,
    *,
    extra: dict[str, Any] | None = None,
    run_dir: Path | None = None,
) -> Path:
    """Computes `error_analysis(...)` and writes it (plus `extra`) → `error_analysis.json`."""
    result = error_analysis(labels, predictions, buckets)
    if extra:
        result.update(extra)
    path = (run_dir or metrics.run_dir()) / ERROR_ANALYSIS_FILE
    _atomic_write(path, json.dumps(result, indent=1) + "\n")
    return path


def finish(
    checkpointer: Any,
    step: int,
    rows: Iterable[dict[str, Any]],
    *,
    labels: Sequence[Any],
    predictions: Sequence[Any],
    buckets: Sequence[Any] | None = None,
    **save_kwargs: Any,
) -> list[Path]:
    """Writes all three default deliverables: predictions, error analysis, `checkpoints/final.pt`."""
    run_dir = checkpointer.dir.parent
    paths = [
        write_predictions(rows, run_dir),
        write_error_analysis(labels, predictions, buckets, run_dir=run_dir),
        checkpointer.save_final(step, **save_kwargs),
    ]
    metrics.flush()
    return paths
