"""`Trainer(..., callbacks=[CampaignCallback()])`: the HF Trainer's logs and saves, reported.

Every `on_log` becomes `metrics.report(state.global_step, ...)` with the numeric values the
Trainer logged (loss, grad_norm, learning_rate, eval_*...), so rules judge the true global step;
every `on_save` announces `output_dir/checkpoint-<step>` as a `checkpoint` event, which the
supervisor grades in a fresh process. transformers is imported when the callback is made.
"""

from __future__ import annotations

import os
from typing import Any

from campaign_train import metrics


def _numbers(logs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in (logs or {}).items():
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step", "total_flos"):
            out[str(key)] = float(value)
    return out


def CampaignCallback() -> Any:  # noqa: N802  (reads as the class it returns)
    """A `transformers.TrainerCallback` that reports to campaign_train.metrics."""
    from transformers import TrainerCallback

    class _CampaignCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if not state.is_world_process_zero:
                return
            values = _numbers(logs or {})
            if "train_runtime" in values or not values:
                return
            loss = values.pop("loss", None)
            metrics.report(state.global_step, loss=loss, **values)

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
                metrics.event("checkpoint", path=os.path.abspath(path), step=int(state.global_step))

    return _CampaignCallback()
