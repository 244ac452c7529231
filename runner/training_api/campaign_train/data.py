"""A DataLoader that records its own position as batches are consumed.

`resumable_loader` returns one: each batch it hands to the training loop moves its
`ResumableSampler` on by that batch's size (the last batch of an epoch may be short), so the
position a checkpoint saves is always the next unseen sample, with no call to make. It counts what
the loop *received*, not what worker processes prefetched. `ResumableSampler` (the position itself)
lives here too, next to the loader that moves it. Imports: torch only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader over a `ResumableSampler` that advances it batch by batch."""

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator over the base iterator, not its _BaseDataLoaderIter
        sampler: Any = self.sampler  # a ResumableSampler (below)
        sampler.tracked_by_loader = True  # its own advance() now does nothing: no double count
        size = int(self.batch_size or 1)
        for batch in super().__iter__():
            sampler._consume(min(size, sampler.n - sampler.consumed))  # before the loop sees it
            yield batch


class ResumableSampler(torch.utils.data.Sampler):
    """A (shuffled) sampler that resumes mid-epoch at the exact next sample.

    Each epoch's order is a permutation drawn from its own generator (seed, epoch), so it does not
    depend on the global RNG. The position counts what the loop *consumed* (`advance`), not what
    the DataLoader prefetched, so it is right with worker processes too. An epoch ends when every
    sample was consumed (use `drop_last=False`).
    """

    def __init__(self, n: int, *, shuffle: bool = True, seed: int = 0) -> None:
        self.n = int(n)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0
        self.consumed = 0
        self.tracked_by_loader = False  # set by ResumableLoader, which counts batches itself

    def order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.n))
        g = torch.Generator()
        g.manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def __iter__(self) -> Iterator[int]:
        yield from self.order(self.epoch)[self.consumed :]

    def __len__(self) -> int:
        return self.n

    def advance(self, k: int) -> None:
        """The loop consumed `k` more samples (call once per batch with its size), for a sampler in
        a DataLoader of your own. Under `resumable_loader` the loader counts: this does nothing."""
        if not self.tracked_by_loader:
            self._consume(k)

    def _consume(self, k: int) -> None:
        self.consumed += int(k)
        if self.consumed >= self.n:
            self.epoch += 1
            self.consumed = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "ResumableSampler",
            "epoch": self.epoch,
            "consumed": self.consumed,
            "n": self.n,
            "seed": self.seed,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("n", "seed", "shuffle"):
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"data position was saved for {key}={state.get(key)!r}, "
                    f"this sampler has {getattr(self, key)!r}: the corpus or seed changed"
                )
        self.epoch = int(state["epoch"])
        self.consumed = int(state["consumed"])


def resumable_loader(
    dataset: Any, batch_size: int, *, seed: int = 0, shuffle: bool = True, **kwargs: Any
) -> torch.utils.data.DataLoader:
    """A DataLoader over a `ResumableSampler` (`loader.sampler`) that records its position as
    batches are consumed (`campaign_train.data.ResumableLoader`) and leaves the global RNG alone.

    A plain DataLoader draws its worker seed from the global torch RNG each time an epoch starts;
    after a mid-epoch resume that draw would happen at a different point and shift every later
    random number. Its own generator keeps the global stream identical to an uninterrupted run.
    """
    sampler = ResumableSampler(len(dataset), shuffle=shuffle, seed=seed)
    gen = torch.Generator()
    gen.manual_seed(seed)
    return ResumableLoader(dataset, batch_size=batch_size, sampler=sampler, generator=gen, drop_last=False, **kwargs)
