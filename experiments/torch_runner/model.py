"""The GPT of the experiment files as a real PyTorch module.

With the defaults it is exactly the model of tests/fixtures/torch-2.11-h200/record_torch_traces.py
(pre-LayerNorm blocks, eager attention with an explicit causal mask and softmax dropout, GeLU MLP,
untied head without bias), so a run of the fixtures' experiment repeats their request stream.
The other knobs follow engine/workload/workload.h.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, m, checkpoint_ffn):
        super().__init__()
        h = m["hidden"]
        self.heads, self.hidden = m["heads"], h
        self.dropout, self.residual_dropout = m["dropout"], m["residual_dropout"]
        self.sdpa = m["attention"] == "sdpa"
        self.checkpoint_ffn = checkpoint_ffn
        self.ln1 = nn.LayerNorm(h, bias=m["bias"])
        self.ln2 = nn.LayerNorm(h, bias=m["bias"])
        self.qkv = nn.Linear(h, 3 * h, bias=m["bias"])
        self.proj = nn.Linear(h, h, bias=m["bias"])
        self.fc1 = nn.Linear(h, m["ffn_mult"] * h, bias=m["bias"])
        self.fc2 = nn.Linear(m["ffn_mult"] * h, h, bias=m["bias"])
        # torch.compile replaces these per module kind (training.compile); eager by default.
        # torch.compile'd replacements (training.compile); None = eager. Kept out of the module
        # tree so parameters and their order stay the fixtures', and no bound method of self is
        # stored: that would be a reference cycle keeping the block's memory alive after training
        # until the garbage collector happens to run.
        object.__setattr__(self, "compiled", dict(ln1=None, ln2=None, mlp=None))

    def attn(self, x):
        b, t, _ = x.shape
        h, heads = self.hidden, self.heads
        q, k, v = self.qkv(x).view(b, t, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        else:
            a = (q @ k.transpose(-2, -1)) / math.sqrt(h // heads)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).triu(1)
            a = a.masked_fill(mask, float("-inf")).softmax(-1)
            a = F.dropout(a, self.dropout, self.training)
            y = a @ v
        y = self.proj(y.transpose(1, 2).reshape(b, t, h))
        return F.dropout(y, self.dropout, self.training) if self.residual_dropout else y

    def mlp(self, x):
        y = self.fc2(F.gelu(self.fc1(x)))
        return F.dropout(y, self.dropout, self.training) if self.residual_dropout else y

    def _pick(self, name, eager):
        compiled = self.compiled[name]
        return eager if compiled is None else compiled

    def ffn(self, x):
        return self._pick("mlp", self.mlp)(self._pick("ln2", self.ln2)(x))

    def forward(self, x):
        x = x + self.attn(self._pick("ln1", self.ln1)(x))
        if self.checkpoint_ffn:
            return x + checkpoint(self.ffn, x, use_reentrant=False)
        return x + self.ffn(x)


class GPT(nn.Module):
    def __init__(self, m, training):
        super().__init__()
        self.vocab = m["vocab"]
        ckpt = training["checkpointing"]
        every = training["checkpoint_every"]
        self.emb = nn.Embedding(m["vocab"], m["hidden"])
        self.pos = nn.Embedding(m["positions"], m["hidden"]) if m["positions"] > 0 else None
        self.blocks = nn.ModuleList(Block(m, ckpt == "ffn") for _ in range(m["layers"]))
        # blocks: every k-th block (0, k, 2k, ...) is checkpointed whole.
        self.checkpointed = [ckpt == "blocks" and i % every == 0 for i in range(m["layers"])]
        self.ln_f = nn.LayerNorm(m["hidden"], bias=m["bias"]) if m["final_layernorm"] else None
        self.head = nn.Linear(m["hidden"], m["vocab"], bias=False)
        if m["tied_embeddings"]:
            self.head.weight = self.emb.weight

    def forward(self, idx):
        x = self.emb(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk, ckpt in zip(self.blocks, self.checkpointed):
            x = checkpoint(blk, x, use_reentrant=False) if ckpt else blk(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def apply_compile(model, spec):
    """torch.compile on the module kinds `spec` names (LayerNorms, MLPs); the loss is compiled by
    the training loop. A compiled MLP holds the block's bound method, a cycle; the training loop
    collects garbage at its end so memory_stats() sees the model freed, as in eager runs."""
    for blk in model.blocks:
        if spec["layernorm"]:
            blk.compiled["ln1"] = torch.compile(blk.ln1)
            blk.compiled["ln2"] = torch.compile(blk.ln2)
        if spec["mlp"]:
            blk.compiled["mlp"] = torch.compile(blk.mlp)
