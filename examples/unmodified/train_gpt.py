"""A tiny character-level GPT trainer that behaves like karpathy/nanoGPT's `train.py` where it
matters to a runner that watches it from outside (written from scratch for this example).

It knows nothing of campaign-console: no CAMPAIGN_* variables, no metric file, no signal handler
(SIGTERM kills it at once, as it does nanoGPT). What the runner can see is what nanoGPT shows:
  - stdout lines `step 250: train loss 2.1034, val loss 2.1377` at each evaluation and
    `iter 120: loss 2.3104, time 12.45ms, mfu -100.00%` every `log_interval` iterations;
  - `<out_dir>/ckpt.pt`, rewritten in place (not atomically) after each evaluation, holding
    {'model', 'optimizer', 'model_args', 'iter_num', 'best_val_loss', 'config'}: enough for
    `--init_from=resume` to go on, but no random-number states and no data position.
The corpus is generated from a fixed seed, so nothing is downloaded. `--lr=50` makes it diverge.

    python train_gpt.py --max_iters=2000 --out_dir=out-control
"""

import argparse
import os
import random
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--out_dir", default="out")
p.add_argument("--init_from", default="scratch", choices=["scratch", "resume"])
p.add_argument("--eval_interval", type=int, default=250)
p.add_argument("--log_interval", type=int, default=10)
p.add_argument("--eval_iters", type=int, default=20)
p.add_argument("--always_save_checkpoint", type=int, default=1)
p.add_argument("--max_iters", type=int, default=2000)
p.add_argument("--batch_size", type=int, default=16)
p.add_argument("--block_size", type=int, default=32)
p.add_argument("--n_layer", type=int, default=2)
p.add_argument("--n_head", type=int, default=2)
p.add_argument("--n_embd", type=int, default=48)
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--weight_decay", type=float, default=0.1)
p.add_argument("--grad_clip", type=float, default=1.0)
p.add_argument("--seed", type=int, default=1337)
config = vars(p.parse_args())
globals().update(config)

torch.manual_seed(seed)
torch.set_num_threads(1)          # a tiny model: more threads only fight the other runs for cores
os.makedirs(out_dir, exist_ok=True)


def make_corpus(n_chars: int = 200_000) -> str:
    """Sentences drawn from a small grammar: enough structure for the loss to fall visibly."""
    rnd = random.Random(0)
    who = ["the king", "a fool", "my lord", "the queen", "this knight", "our ghost", "thy servant"]
    does = ["speaks of", "dreams of", "weeps for", "laughs at", "sings to", "waits for", "fights"]
    what = ["the crown", "a storm", "his sword", "the sea", "our night", "a rose", "the moon"]
    out, n = [], 0
    while n < n_chars:
        s = f"{rnd.choice(who)} {rnd.choice(does)} {rnd.choice(what)}{rnd.choice(['.', '!', '?', ','])}\n"
        out.append(s)
        n += len(s)
    return "".join(out)[:n_chars]


text = make_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
split = int(0.9 * len(data))
train_data, val_data = data[:split], data[split:]


def get_batch(which: str):
    d = train_data if which == "train" else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(block_size, block_size, dtype=torch.bool), 1))

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.blocks:
            x = b(x, self.mask[:t, :t])
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


model_args = dict(vocab_size=vocab_size, block_size=block_size, n_layer=n_layer, n_head=n_head, n_embd=n_embd)
iter_num, best_val_loss = 0, 1e9
ckpt_path = os.path.join(out_dir, "ckpt.pt")
if init_from == "resume":
    print(f"Resuming training from {out_dir}")
    checkpoint = torch.load(ckpt_path, map_location="cpu")
    model_args = checkpoint["model_args"]
model = GPT(**model_args)
optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
if init_from == "resume":
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    checkpoint = None
n_params = sum(q.numel() for q in model.parameters())
print(f"number of parameters: {n_params / 1e6:.2f}M")


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for which in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = model(*get_batch(which)).item()
        out[which] = losses.mean()
    model.train()
    return out


def estimate_mfu(dt: float) -> float:
    """As nanoGPT does it: achieved flops against an A100's bf16 peak (tiny here, on a CPU)."""
    flops_per_iter = (6 * n_params + 12 * n_layer * n_embd * block_size) * block_size * batch_size
    return flops_per_iter / dt / 312e12


X, Y = get_batch("train")
t0 = time.time()
local_iter_num, running_mfu = 0, -1.0
while True:
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0:
                checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                              "model_args": model_args, "iter_num": iter_num,
                              "best_val_loss": best_val_loss, "config": config}
                print(f"saving checkpoint to {out_dir}")
                torch.save(checkpoint, ckpt_path)          # in place, like nanoGPT: not atomic
    loss = model(X, Y)
    X, Y = get_batch("train")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0:
        lossf = loss.item()
        if local_iter_num >= 5:
            mfu = estimate_mfu(dt)
            running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, mfu {running_mfu * 100:.2f}%")
    iter_num += 1
    local_iter_num += 1
    if iter_num > max_iters:
        break
