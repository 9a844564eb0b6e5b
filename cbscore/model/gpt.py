"""The paper's decoder-only transformer (Zhang et al. 2025, §3 and appendix; OLMo-style blocks).

Pre-LayerNorm blocks, rotary position embeddings (Su et al. 2021, arXiv 2104.09864), LayerNorm on
queries and keys (Dehghani et al. 2023; OLMo's ``attention_layer_norm``), a GELU MLP of width
4d, no biases anywhere, untied input and output embeddings, no dropout, and attention through
``scaled_dot_product_attention``. Initialisation follows OLMo's "mitchell" scheme (Groeneveld et
al. 2024, arXiv 2402.00838): truncated normal at ±3σ with σ = 1/√fan_in, and the two output
projections of block ``i`` scaled down with depth to σ = 1/√(2·fan_in·(i + 1)).

Shape of the code follows nanoGPT: one :class:`GPTConfig` passed whole to every module and
``forward(idx, targets=None) -> (logits, loss)``, except that with targets the logits are not
returned (``(None, loss)``): the caller would keep the (B, T, V) tensor alive through backward,
about 2 GB at a bf16 micro-batch of 256 and V = 8192. Shapes: B batch, T time, C = d_model,
H heads, D = C / H head width, V vocabulary.

Parameter count. ``N`` is the paper's non-embedding count, the block matrices only:
per block 4·C² (attention q, k, v, out) + 8·C² (MLP 4C wide) = 12·C², so ``N = 12·L·C²``
(Kaplan et al. 2020, §2.1). LayerNorm gains (2 per block plus q/k norms, about 4·L·C numbers)
and the two embeddings are not counted, which is what makes each preset's N equal its name.

Training FLOPs per token ``6·(N + C·V) + 12·L·C·T`` (Chowdhery et al. 2022, PaLM, appendix B;
Kaplan et al. 2020, table 1): 2 forward and 4 backward FLOPs per weight of the block matmuls (6N)
and of the output head (6·C·V, about 30% of the 85M model's FLOPs at a 50k vocabulary), and
12·L·C·T for attention scores and values (counted unmasked, as PaLM does). The input embedding
is a lookup and costs no FLOPs. ``torch.utils.flop_counter`` counts exactly this on a forward
and backward pass under the math attention kernel (tests/cbscore/test_model.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cbscore.model.config import GPTConfig


class Rotary(nn.Module):
    """Rotary position embedding tables (Su et al. 2021, eq. 34), "rotate-half" layout.

    ``sin`` holds the sine with its first half negated, so that rotate-half is a swap of the two
    halves with no negation pass: ``cat(-x2, x1)·sin == cat(x2, x1)·sin_signed`` bit for bit
    (IEEE rounding is symmetric: ``(-a)·b == a·(-b)``). :class:`GPT` slices the tables once per
    forward (:meth:`tables`) and every block's queries and keys use them (:func:`rotate`)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        head_dim = config.d_model // config.n_heads
        # θ_i = base^(-2i/D), i = 0 .. D/2 - 1
        inv_freq = config.rope_base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(config.context_tokens, dtype=torch.float32), inv_freq)  # (T, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (T, D)
        sin = angles.sin()  # (T, D); negated from the same values, so each half is the sine of before
        half = head_dim // 2
        self.register_buffer("cos", angles.cos(), persistent=False)  # (T, D)
        self.register_buffer("sin", torch.cat([-sin[:, :half], sin[:, half:]], dim=-1), persistent=False)  # (T, D)

    def tables(self, t: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` of the first ``t`` positions in ``dtype``: (T, D) each."""
        return self.cos[:t].to(dtype), self.sin[:t].to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, H, T, D)
        return rotate(x, self.tables(x.size(-2), x.dtype))


def rotate(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+D/2}) of ``x`` (B, H, T, D) by angle t·θ_i (:class:`Rotary`'s tables)."""
    cos, sin = tables  # (T, D); sin's first half negated
    x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, D/2) each
    return x * cos + torch.cat([x2, x1], dim=-1) * sin  # x·cos + rotate_half(x)·sin


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        c = config.d_model
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(c, 3 * c, bias=False)
        # QK-LayerNorm over the full width, as OLMo's attention_layer_norm: keeps logits bounded
        # at high learning rates (Dehghani et al. 2023, arXiv 2302.05442).
        self.q_norm = nn.LayerNorm(c, bias=False)
        self.k_norm = nn.LayerNorm(c, bias=False)
        self.out = nn.Linear(c, c, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        q, k, v = self.qkv(x).split(c, dim=-1)  # 3 × (B, T, C)
        q, k = self.q_norm(q), self.k_norm(k)
        h = self.n_heads
        q = q.view(b, t, h, c // h).transpose(1, 2)  # (B, H, T, D)
        k = k.view(b, t, h, c // h).transpose(1, 2)  # (B, H, T, D)
        v = v.view(b, t, h, c // h).transpose(1, 2)  # (B, H, T, D)
        q, k = rotate(q, rope), rotate(k, rope)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(b, t, c)  # (B, T, C)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 4 * config.d_model, bias=False)
        self.proj = nn.Linear(4 * config.d_model, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """Pre-LN block: x + attn(LN(x)), then x + mlp(LN(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model, bias=False)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model, bias=False)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), rope)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.rotary = Rotary(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, bias=False)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # untied
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """OLMo "mitchell" init (Groeneveld et al. 2024): truncated normal at ±3σ, σ = 1/√fan_in;
        block i's attention and MLP output projections use σ = 1/√(2·fan_in·(i + 1))."""

        def trunc(weight: torch.Tensor, std: float) -> None:
            nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

        c = self.config.d_model
        trunc(self.wte.weight, 1 / math.sqrt(c))
        for i, block in enumerate(self.blocks):
            trunc(block.attn.qkv.weight, 1 / math.sqrt(c))
            trunc(block.attn.out.weight, 1 / math.sqrt(2 * c * (i + 1)))
            trunc(block.mlp.fc.weight, 1 / math.sqrt(c))
            trunc(block.mlp.proj.weight, 1 / math.sqrt(2 * 4 * c * (i + 1)))
        trunc(self.lm_head.weight, 1 / math.sqrt(c))
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)

    @property
    def n_params(self) -> int:
        """Non-embedding parameters N = 12·L·C² (block matrices only; see the module docstring)."""
        return sum(p.numel() for n, p in self.blocks.named_parameters() if p.dim() == 2)

    @property
    def n_params_total(self) -> int:
        """Every trainable number, embeddings and LayerNorm gains included."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, context_tokens: int | None = None) -> float:
        """Training FLOPs per token, 6·(N + C·V) + 12·L·C·T (see the module docstring)."""
        return self.config.flops_per_token(context_tokens)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(logits, None)`` without targets; ``(None, loss)`` with them (see the module docstring)."""
        # idx, targets: (B, T) int64 token ids
        x = self.wte(idx)  # (B, T, C)
        rope = self.rotary.tables(idx.size(1), x.dtype)  # once per forward, shared by every block
        for block in self.blocks:
            x = block(x, rope)  # (B, T, C)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        # mean next-token cross-entropy in nats; float32 for the softmax under bf16 autocast
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return None, loss  # no (B, T, V) logits held by the caller through backward
