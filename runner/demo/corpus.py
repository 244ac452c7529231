"""The demo's fixed corpus: short texts in six topics, generated from a seed (no download).

Why generated: the demo must run anywhere, offline, and give every variant the very same data.
Each text mixes filler words with words of its topic and a few from other topics; about one in
sixteen is longer than the model's maximum input length, so truncation is real and reported.
A small share of labels is flipped, so no variant reaches a perfect score by construction.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

LABELS = ("weather", "sport", "market", "science", "travel", "food")
SEED = 20261129
TRAIN_SIZE = 6000
DEV_SIZE = 600
LABEL_NOISE = 0.03
LONG_SHARE = 1 / 16

_ONSETS = "b d f g k l m n p r s t v z sh tr pl".split()
_VOWELS = "a e i o u ai ou".split()


def _words(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3)))
        if w not in taken:
            taken.add(w)
            out.append(w)
    return out


def make_corpus(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(train, dev): rows of {"id", "text", "label"} — the same for the same seed, everywhere."""
    rng = random.Random(seed)
    taken: set[str] = set()
    filler = _words(rng, 400, taken)
    topic = {label: _words(rng, 40, taken) for label in LABELS}

    def example(i: int, split: str) -> dict:
        label = rng.randrange(len(LABELS))
        n = rng.randint(56, 90) if rng.random() < LONG_SHARE else rng.randint(8, 40)
        words = []
        for _ in range(n):
            r = rng.random()
            if r < 0.10:
                words.append(rng.choice(topic[LABELS[label]]))
            elif r < 0.16:
                words.append(rng.choice(topic[rng.choice(LABELS)]))
            else:
                words.append(rng.choice(filler))
        words[rng.randrange(n)] = rng.choice(topic[LABELS[label]])
        if rng.random() < LABEL_NOISE:
            label = rng.randrange(len(LABELS))
        return {"id": f"{split}-{i:05d}", "text": " ".join(words), "label": LABELS[label]}

    train = [example(i, "train") for i in range(TRAIN_SIZE)]
    dev = [example(i, "dev") for i in range(DEV_SIZE)]
    return train, dev


def write_corpus(directory: Path, seed: int = SEED) -> tuple[Path, Path]:
    """Writes `train.jsonl` and `dev.jsonl` into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    train, dev = make_corpus(seed)
    paths = []
    for name, rows in (("train", train), ("dev", dev)):
        p = directory / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        paths.append(p)
    return paths[0], paths[1]
