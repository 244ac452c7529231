"""A DataLoader that records its own position as batches are consumed.

`resumable_loader` returns one: each batch it hands to the training loop moves its
`ResumableSampler` on by that batch's size (the last batch of an epoch may be short), so the
position a checkpoint saves is always the next unseen sample, with no call to make. It counts what
the loop *received*, not what worker processes prefetched. Imports: torch only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader over a `ResumableSampler` that advances it batch by batch."""

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator over the base iterator, not its _BaseDataLoaderIter
        sampler: Any = self.sampler  # a ResumableSampler (campaign_train.checkpoint)
        sampler.tracked_by_loader = True  # its own advance() now does nothing: no double count
        size = int(self.batch_size or 1)
        for batch in super().__iter__():
            sampler._consume(min(size, sampler.n - sampler.consumed))  # before the loop sees it
            yield batch
