"""`L.Trainer(..., callbacks=[campaign_callback()])`: Lightning's logged metrics, reported.

After each training batch (and each validation epoch) the numbers Lightning holds in
`trainer.callback_metrics` (what `self.log` recorded) are reported with `trainer.global_step`,
the true optimizer step. Lightning prints nothing a regex could follow, so without this callback
an unmodified Lightning script is followed by nothing. Lightning is imported when the callback is
made (`lightning`, else `pytorch_lightning`)."""

from __future__ import annotations

import importlib
from typing import Any

from campaign_train import metrics


def _values(trainer: Any) -> dict[str, Any]:
    out = {}
    for key, value in dict(trainer.callback_metrics).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def campaign_callback() -> Any:
    """A Lightning `Callback` that reports to campaign_train.metrics."""
    try:
        callbacks: Any = importlib.import_module("lightning.pytorch.callbacks")
    except ImportError:
        callbacks = importlib.import_module("pytorch_lightning.callbacks")
    base: Any = callbacks.Callback

    class _CampaignCallback(base):  # Lightning's Callback, found at run time
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.is_global_zero:
                values = _values(trainer)
                if isinstance(outputs, dict) and "loss" in outputs and "loss" not in values:
                    values["loss"] = float(outputs["loss"])
                if values:
                    loss = values.pop("loss", values.pop("train_loss", None))
                    metrics.report(trainer.global_step, loss=loss, **values)

        def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.is_global_zero and not trainer.sanity_checking:
                values = {k: v for k, v in _values(trainer).items() if k.startswith(("val", "eval"))}
                if values:
                    metrics.report(trainer.global_step, **values)

    return _CampaignCallback()
