"""The demo campaign's training script: topic classification of short texts with a small GRU.

Run from the campaign folder as `python train.py --lr 0.1`. It reports every step's loss and
truncation counts and a periodic `dev_acc` (campaign_train.metrics), checkpoints every
CAMPAIGN_CHECKPOINT_EVERY seconds and on SIGUSR1/SIGTERM (campaign_train.checkpoint), resumes exactly
from CAMPAIGN_RESUME_FROM or its latest checkpoint, and at the end writes its predictions on the
dev split, an error analysis and `checkpoints/final.pt` (campaign_train.predictions). Outside the runner
it writes to ./campaign-run/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import torch

from campaign_train import metrics
from campaign_train.checkpoint import Checkpointer, ResumableSampler, resumable_loader
from campaign_train.predictions import finish

PAD, UNK = 0, 1


def load_split(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def encode(rows: list[dict], vocab: dict[str, int], labels: list[str], max_len: int):
    """Token ids cut to `max_len` (padded), labels, and whether each input was truncated."""
    ids = torch.full((len(rows), max_len), PAD, dtype=torch.long)
    lengths = torch.zeros(len(rows), dtype=torch.long)
    cut = torch.zeros(len(rows), dtype=torch.bool)
    for i, row in enumerate(rows):
        words = row["text"].split()
        cut[i] = len(words) > max_len
        toks = [vocab.get(w, UNK) for w in words[:max_len]]
        ids[i, : len(toks)] = torch.tensor(toks)
        lengths[i] = len(toks)
    y = torch.tensor([labels.index(r["label"]) for r in rows])
    return ids, lengths, y, cut


class Classifier(torch.nn.Module):
    def __init__(self, vocab_size: int, n_labels: int, hidden: int) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, 32, padding_idx=PAD)
        self.gru = torch.nn.GRU(32, hidden, batch_first=True)
        self.drop = torch.nn.Dropout(0.1)
        self.mid = torch.nn.Linear(hidden, hidden)
        self.out = torch.nn.Linear(hidden, n_labels)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            self.emb(ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        _, h = self.gru(packed)
        return self.out(torch.relu(self.mid(self.drop(h[0]))))


@torch.no_grad()
def evaluate(model: Classifier, dev, device) -> tuple[float, float, torch.Tensor]:
    model.eval()
    ids, lengths, y, _cut = dev
    logits = torch.cat(
        [model(ids[i : i + 200].to(device), lengths[i : i + 200]).float().cpu() for i in range(0, len(y), 200)]
    )
    model.train()
    loss = torch.nn.functional.cross_entropy(logits, y).item()
    pred = logits.argmax(dim=1)
    return (pred == y).float().mean().item(), loss, pred


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=48)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="data", help="folder with train.jsonl and dev.jsonl")
    args = ap.parse_args()

    torch.set_num_threads(1)  # two variants can share a 2-core host
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    use_cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", None) != ""
    device = torch.device("cuda" if use_cuda else "cpu")

    data = Path(args.data)
    train_rows, dev_rows = load_split(data / "train.jsonl"), load_split(data / "dev.jsonl")
    labels = sorted({r["label"] for r in train_rows})
    words = sorted({w for r in train_rows for w in r["text"].split()})
    vocab = {w: i + 2 for i, w in enumerate(words)}
    train_ids, train_len, train_y, train_cut = encode(train_rows, vocab, labels, args.max_len)
    dev = encode(dev_rows, vocab, labels, args.max_len)
    dataset = torch.utils.data.TensorDataset(train_ids, train_len, train_y, train_cut)
    loader = resumable_loader(dataset, args.batch, seed=args.seed)

    model = Classifier(len(vocab) + 2, len(labels), args.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    warmup = 100  # then a linear decay to zero, so the last dev_acc is a settled one
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / max(1, args.steps - warmup)))
    )
    sampler = loader.sampler
    assert isinstance(sampler, ResumableSampler)  # resumable_loader's own sampler
    ckpt = Checkpointer(
        model,
        opt,
        scheduler=sched,
        sampler=sampler,
        every_s=float(os.environ.get("CAMPAIGN_CHECKPOINT_EVERY", "15")),
    )
    restored = ckpt.restore()
    step = restored.step if restored else 0
    metrics.report(step, total_steps=args.steps)  # lets the pilot estimate the time left
    print(
        f"device {device}, {len(train_rows)} train / {len(dev_rows)} dev, lr {args.lr}, "
        f"hidden {args.hidden}, " + (f"resumed at step {step}" if restored else "fresh start"),
        flush=True,
    )

    while step < args.steps:
        for ids, lengths, y, cut in loader:
            loss = torch.nn.functional.cross_entropy(model(ids.to(device), lengths), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            sampler.advance(len(y))
            step += 1
            metrics.report(step, loss=loss.item(), lr=sched.get_last_lr()[0], truncated=int(cut.sum()), samples=len(y))
            if step % args.eval_every == 0 or step == args.steps:
                acc, dev_loss, _ = evaluate(model, dev, device)
                metrics.report(step, dev_acc=acc, dev_loss=dev_loss, total_steps=args.steps)
                print(f"step {step}: loss {loss.item():.4f} dev_acc {acc:.4f}", flush=True)
            ckpt.maybe_save(step)
            if ckpt.should_stop:
                print(f"asked to stop: saved step {step}", flush=True)
                ckpt.exit()
            if step >= args.steps:
                break

    acc, _dev_loss, pred = evaluate(model, dev, device)
    rows = [
        {
            "id": r["id"],
            "label": r["label"],
            "prediction": labels[int(p)],
            "correct": labels[int(p)] == r["label"],
            "truncated": bool(c),
        }
        for r, p, c in zip(dev_rows, pred, dev[3])
    ]
    finish(
        ckpt,
        step,
        rows,
        labels=[r["label"] for r in rows],
        predictions=[r["prediction"] for r in rows],
        buckets=["long (truncated)" if r["truncated"] else "fits" for r in rows],
    )
    print(f"done: step {step}, dev_acc {acc:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
