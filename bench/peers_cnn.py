#!/usr/bin/env python3
"""Peer of examples/cifar10:train: the CNN of TensorFlow's CIFAR-10 tutorial in PyTorch 2 on the
CPU, one process (the arithmetic of one data-parallel step with nothing sharded), for the figures
next to dtensor's examples/sec on the same machine.

The model and step match the example: conv 5x5x64 SAME + ReLU, max pool 3x3/2 SAME, LRN
(depth_radius 4, bias 1, alpha 0.001/9, beta 0.75), conv 5x5x64 + ReLU, LRN, max pool, dense 384,
dense 192 (ReLU), dense 10; truncated-normal weights with the tutorial's deviations and biases;
loss = mean cross-entropy + 0.004 * (l2(local3) + l2(local4)); plain SGD; then the moving average
of every variable (decay min(0.9999, (1 + n) / (10 + n))). TF's SAME pooling pads after the
input only, so the pools pad (0, 1) with -inf explicitly; torch's LRN divides alpha by the window
size, so it gets 0.001 / 9 * 9.

  peers_cnn.py step  [--image 24x24x3] [--batch 128] [--threads 2] [--rounds 20]
                     [--channels_last] [--autocast] [--variants all]
      median time of one training step at the batch; one JSON line:
      {"peer":"torch2","model":"cifar10_cnn","median_ms":..,"examples_per_s":..,...}
      --autocast runs the forward pass and the loss under torch.autocast("cpu", bfloat16) (the
      mixed_bfloat16 policy's peer: bf16 convolutions and linears, f32 weights and SGD);
      --channels_last keeps activations and conv weights NHWC in memory (oneDNN's preferred
      layout). --variants all measures the four combinations interleaved: the rounds take turns,
      one step of each variant per round, so that a change in the machine's load falls on all.
  peers_cnn.py train [--data_dir /usr/share/datasets/fashion-mnist] [--epochs 3]
      the example's recipe on Fashion-MNIST (28x28x1, no augmentation); one JSON line per epoch
      (train loss, test accuracy with the averaged weights, examples/sec)

Needs torch and numpy (e.g. $PEERS_VENV/bin/python bench/peers_cnn.py step, a venv set up as in the peers README).
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

LRN = dict(size=9, alpha=0.001 / 9.0 * 9, beta=0.75, k=1.0)


def emit(**fields):
    print(json.dumps(fields), flush=True)


def note(msg):
    print(msg, file=sys.stderr, flush=True)


def same_pool_size(n):
    return (n + 1) // 2


class Cnn(torch.nn.Module):
    def __init__(self, h, w, c, classes=10):
        super().__init__()
        flat = same_pool_size(same_pool_size(h)) * same_pool_size(same_pool_size(w)) * 64
        self.conv1 = torch.nn.Conv2d(c, 64, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(64, 64, 5, padding=2)
        self.local3 = torch.nn.Linear(flat, 384)
        self.local4 = torch.nn.Linear(384, 192)
        self.softmax_linear = torch.nn.Linear(192, classes)
        self.norm = torch.nn.LocalResponseNorm(**LRN)
        with torch.no_grad():
            for layer, std, bias in ((self.conv1, 5e-2, 0.0), (self.conv2, 5e-2, 0.1),
                                     (self.local3, 0.04, 0.1), (self.local4, 0.04, 0.1),
                                     (self.softmax_linear, 1 / 192.0, 0.0)):
                torch.nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
                layer.bias.fill_(bias)

    @staticmethod
    def pool(x):
        # TF SAME for a 3x3 window at stride 2 on even sizes: one padded row and column after.
        return F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=float("-inf")), 3, 2)

    def forward(self, x):  # x: NCHW
        x = self.norm(self.pool(F.relu(self.conv1(x))))
        x = self.pool(self.norm(F.relu(self.conv2(x))))
        # Flatten in NHWC order as the example does (the order only permutes local3's rows).
        x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        x = F.relu(self.local3(x))
        x = F.relu(self.local4(x))
        return self.softmax_linear(x)


class Trainer:
    def __init__(self, model, lr=0.1, wd=0.004, ema_decay=0.9999, autocast=False):
        self.model, self.lr, self.wd, self.ema_decay = model, lr, wd, ema_decay
        self.autocast = autocast
        self.params = list(model.parameters())
        self.shadows = [p.detach().clone() for p in self.params]
        self.updates = 0

    def step(self, x, y):
        m = self.model
        for p in self.params:
            p.grad = None
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=self.autocast):
            loss = F.cross_entropy(m(x), y)
            loss = loss + self.wd * 0.5 * (m.local3.weight.square().sum() +
                                           m.local4.weight.square().sum())
        loss.backward()
        with torch.no_grad():
            torch._foreach_add_(self.params, [p.grad for p in self.params], alpha=-self.lr)
            n = self.updates
            decay = min(self.ema_decay, (1 + n) / (10 + n))
            torch._foreach_lerp_(self.shadows, self.params, 1 - decay)
        self.updates += 1
        return loss

    def swap(self):
        with torch.no_grad():
            for p, s in zip(self.params, self.shadows):
                tmp = p.detach().clone()
                p.copy_(s)
                s.copy_(tmp)


def parse_image(text):
    h, w, c = (int(v) for v in text.split("x"))
    return h, w, c


VARIANTS = [(False, False), (True, False), (False, True), (True, True)]  # (channels_last, autocast)


def make_step(args, channels_last, autocast):
    """One variant's trainer and batch; returns a function that runs one step."""
    h, w, c = parse_image(args.image)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.rand(args.batch, c, h, w, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)
    torch.manual_seed(args.seed)
    trainer = Trainer(Cnn(h, w, c), autocast=autocast)
    if channels_last:
        trainer.model = trainer.model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return lambda: trainer.step(x, y)


def run_step(args):
    variants = VARIANTS if args.variants == "all" else [(args.channels_last, args.autocast)]
    steps = [make_step(args, cl, ac) for cl, ac in variants]
    t0 = time.perf_counter()
    for step in steps:
        for _ in range(2):
            step()
    note(f"peers_cnn: first 2 steps of {len(steps)} variant(s) {time.perf_counter() - t0:.2f}s")
    times = [[] for _ in steps]
    for _ in range(args.rounds):
        for step, t in zip(steps, times):
            t0 = time.perf_counter()
            step()
            t.append((time.perf_counter() - t0) * 1e3)
    for (channels_last, autocast), t in zip(variants, times):
        median = statistics.median(t)
        emit(peer="torch2", model="cifar10_cnn", image=args.image, batch=args.batch,
             threads=args.threads, channels_last=channels_last,
             autocast="bf16" if autocast else "off", median_ms=round(median, 3),
             min_ms=round(min(t), 3), examples_per_s=round(args.batch / median * 1e3, 1),
             rounds=args.rounds, torch=torch.__version__)


def read_idx(data_dir, name):
    for path in (os.path.join(data_dir, name), os.path.join(data_dir, name + ".gz")):
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                return f.read()
    raise SystemExit(f"no {name}[.gz] in {data_dir}")


def load_fashion(data_dir, limit):
    def split(stem):
        x = np.frombuffer(read_idx(data_dir, f"{stem}-images-idx3-ubyte")[16:], np.uint8)
        y = np.frombuffer(read_idx(data_dir, f"{stem}-labels-idx1-ubyte")[8:], np.uint8)
        x = torch.from_numpy(x.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
        y = torch.from_numpy(y.astype(np.int64))
        return (x[:limit], y[:limit]) if limit > 0 else (x, y)
    return split("train"), split("t10k")


def run_train(args):
    (xt, yt), (xe, ye) = load_fashion(args.data_dir, args.limit)
    trainer = Trainer(Cnn(28, 28, 1))
    for epoch in range(args.epochs):
        order = torch.from_numpy(np.random.default_rng([args.seed, epoch]).permutation(len(yt)))
        loss_sum, seen, t0 = 0.0, 0, time.perf_counter()
        for s in range(0, len(yt), args.batch):
            idx = order[s:s + args.batch]
            loss_sum += trainer.step(xt[idx], yt[idx]).item() * len(idx)
            seen += len(idx)
        seconds = time.perf_counter() - t0
        trainer.swap()  # evaluate with the averages
        with torch.no_grad():
            correct = sum((trainer.model(xe[s:s + 500]).argmax(1) == ye[s:s + 500]).sum().item()
                          for s in range(0, len(ye), 500))
        trainer.swap()
        emit(peer="torch2", model="cifar10_cnn", dataset="fashion_mnist", epoch=epoch + 1,
             train_loss=round(loss_sum / seen, 6), test_acc=correct / len(ye),
             examples_per_s=round(seen / seconds, 1), threads=args.threads)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["step", "train"], nargs="?", default="step")
    p.add_argument("--image", default="24x24x3", help="HxWxC of the input (step)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--channels_last", action="store_true")
    p.add_argument("--autocast", action="store_true", help="bf16 autocast (step)")
    p.add_argument("--variants", choices=["one", "all"], default="one",
                   help="all: the four channels_last x autocast variants, interleaved (step)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--limit", type=int, default=-1, help="first N train and test examples (train)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    run_step(args) if args.mode == "step" else run_train(args)


if __name__ == "__main__":
    main()
