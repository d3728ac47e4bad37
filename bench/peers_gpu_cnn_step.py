"""The CIFAR-10 CNN's training step in PyTorch on the same GPU, for bench/gpu_cnn_step.

The model and step of bench/peers_cnn.py (imported from beside this file: the tutorial's CNN, loss
+ L2 weight decay, SGD, moving averages), global batch 128 of 24x24x3, f32 with TF32 off (our
default), NCHW on cuDNN; the median of 30 steps after 5 warm-up steps, each step ending with
torch.cuda.synchronize(), printed in the bench JSON convention:
  {"bench":"peers_gpu_cnn_step","impl":"pytorch","batch":128,"value":...,"unit":"ms/step"}
Run: python3 bench/peers_gpu_cnn_step.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_cnn import Cnn, Trainer  # noqa: E402
from peers_gpu_step import median_step_ms  # noqa: E402


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    device = torch.device("cuda")
    trainer = Trainer(Cnn(24, 24, 3).to(device))
    x = torch.rand(128, 3, 24, 24, device=device)
    labels = torch.randint(0, 10, (128,), device=device)

    print(json.dumps({"bench": "peers_gpu_cnn_step", "impl": "pytorch", "batch": 128,
                      "value": median_step_ms(lambda: trainer.step(x, labels), warmup=5,
                                              rounds=30),
                      "unit": "ms/step"}))


if __name__ == "__main__":
    main()
