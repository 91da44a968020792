"""DDP over gloo, every rank on GPU 0 (the multi-process check of fragscope-record under
torchrun --nproc-per-node 2). Unmodified user code: no recording calls in it."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.cuda.set_device(0)
torch.manual_seed(rank)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for step in range(6):
    x = torch.randn(64 * (rank + 1), 256, device="cuda")
    ddp(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
dist.barrier()
print("rank", rank, "of", dist.get_world_size(), "done, local rank", os.environ.get("LOCAL_RANK"), flush=True)
dist.destroy_process_group()
