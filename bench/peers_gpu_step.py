"""The seed MLP's training step in PyTorch on the same GPU, for bench/gpu_train_step.

784-700-500-10 with ReLU, sparse softmax cross-entropy (mean), Adam(lr=1e-3), global batch 128,
f32 with TF32 off (our default); the median of 50 steps after 5 warm-up steps, each step ending with
torch.cuda.synchronize(), printed in the bench JSON convention:
  {"bench":"peers_gpu_step","impl":"pytorch","batch":128,"value":...,"unit":"ms/step"}
Run: python3 bench/peers_gpu_step.py
"""
import json
import statistics
import time

import torch


def median_step_ms(step, warmup, rounds):
    """The median wall time of step() followed by torch.cuda.synchronize(), after warm-up steps."""
    for _ in range(warmup):
        step()
        torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(22)
    device = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 700), torch.nn.ReLU(),
        torch.nn.Linear(700, 500), torch.nn.ReLU(),
        torch.nn.Linear(500, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    x = torch.rand(128, 784, device=device)
    labels = torch.randint(0, 10, (128,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), labels)
        loss.backward()
        optimizer.step()

    print(json.dumps({"bench": "peers_gpu_step", "impl": "pytorch", "batch": 128,
                      "value": median_step_ms(step, warmup=5, rounds=50), "unit": "ms/step"}))


if __name__ == "__main__":
    main()
