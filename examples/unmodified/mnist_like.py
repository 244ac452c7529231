"""A small digit classifier that behaves like pytorch/examples' `mnist/main.py` where it matters to
a runner that watches it from outside (written from scratch for this example).

It knows nothing of campaign-console. What the runner can see is what that script shows:
  - stdout lines `Train Epoch: 1 [640/6000 (11%)]\tLoss: 2.300000` every `--log-interval` batches
    and, after each epoch, `Test set: Average loss: 0.0512, Accuracy: 9830/10000 (98%)`;
  - with `--save-model`, `mnist_cnn.pt` at the very end: a bare `state_dict` (weights only, so
    the run has no resume point while it trains).
The images are synthetic (ten noisy 28x28 class templates from a fixed seed): nothing is
downloaded. The optimiser is Adadelta with a StepLR schedule, as there.

    python mnist_like.py --epochs 3 --save-model
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(2304, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_digits(n: int, seed: int) -> TensorDataset:
    """Ten fixed templates (seed 0) plus per-sample noise, shift and contrast (seed `seed`)."""
    templates = (torch.rand(10, 28, 28, generator=torch.Generator().manual_seed(0)) > 0.7).float()
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = templates[labels] * (0.5 + torch.rand(n, 1, 1, generator=g))
    shifts = torch.randint(-2, 3, (n,), generator=g)
    images = torch.stack([torch.roll(im, int(s), dims=1) for im, s in zip(images, shifts)])
    images = images + 0.8 * torch.randn(n, 28, 28, generator=g)
    images = (images - 0.1307) / 0.3081
    return TensorDataset(images.unsqueeze(1), labels)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    test_loss /= len(test_loader.dataset)
    print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
        test_loss, correct, len(test_loader.dataset), 100. * correct / len(test_loader.dataset)))


def main():
    parser = argparse.ArgumentParser(description="digit classifier on synthetic images")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--no-accel", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--save-model", action="store_true")
    parser.add_argument("--train-size", type=int, default=6000)
    parser.add_argument("--test-size", type=int, default=10000)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.no_accel else "cpu")
    train_loader = DataLoader(synthetic_digits(args.train_size, args.seed + 1), batch_size=args.batch_size,
                              shuffle=True)
    test_loader = DataLoader(synthetic_digits(args.test_size, args.seed + 2), batch_size=args.test_batch_size)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
