"""A small training loop that runs out of memory under a per-process cap (the GPU check of
fragscope-record): a 2 GiB cap, an MLP trained on batches of growing, varying length until the
caching allocator cannot serve a request. Unmodified user code: no recording calls in it."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--cap-gib", type=float, default=2.0)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()

total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(args.cap_gib * 2**30 / total)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 4096), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
lengths = [512, 1536, 768, 2048, 1024]
for step in range(args.steps):
    rows = lengths[step % len(lengths)] * (1 + step // 5)
    x = torch.randn(rows, 1024, device="cuda")
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, "rows", rows, "allocated", torch.cuda.memory_allocated(), flush=True)
