"""The micro-batch a GPU holds: sequences per forward/backward pass, chosen from free memory.

A trial without a ``micro_batch_size`` on CUDA gets the largest divisor of its per-device batch
whose activations fit in a share of the device's free memory. Training memory is

- **static**, per parameter (every trainable number, embeddings included): fp32 weights (4 B),
  fp32 gradients (4 B), AdamW's two moments (8 B), one fp32 copy per EWA τ and the evaluation
  model's copy (4 B each): ``(20 + 4·n_taus)`` bytes;
- **activations**, per sequence of T tokens: ``34·T·C`` bytes per layer for a block with flash
  attention at 16-bit (Korthikanti et al. 2022, arXiv 2205.05198, eq. 1 without its ``5·a·T²``
  attention-score term, which flash attention does not store), plus ``8·T·C`` for what this
  model adds (the QK-LayerNorm inputs and the rotated q, k), plus ``8·T·C`` because bf16
  autocast is not 16-bit everywhere: the residual stream is fp32 (the master weights' dtype), so
  the inputs the two LayerNorms keep for backward are 4 bytes, not 2 (``+4·T·C``), and the
  QK-LayerNorms run in fp32 on upcast copies of q and k (``+4·T·C``): ``50·T·C`` per layer, 19%
  more than the 16-bit count. And the LM head's ``T·V`` logits (the model returns none, so none
  outlive the loss): the log-softmax kept for backward (4 B) and, at the peak, its gradient (4 B)
  and the bf16 logits' gradient (2 B): ``10·T·V`` bytes.

At 151M (C = 1024, L = 12) and T = 512 that is 0.36 GB a sequence at V = 8192 (an H200's ~139 GB
holds about 307: the rule picks 256, the largest divisor of the batch below it) and 0.57 GB at
GPT-NeoX's 50,304 (about 183: 128 at B = 256), where the LM head is 45% of it. The estimate is
deliberately plain (the GPU check, ``benchmarks/gpu_check.sh``, reports the measured peak beside
it): where it is too optimistic, the trainer's out-of-memory handler halves the micro-batch and
redoes the step (:class:`cbscore.train.step.StepFn`).
"""

from __future__ import annotations

from cbscore.errors import ConfigError
from cbscore.model.config import GPTConfig

#: Share of the free memory the activations may take (the allocator's fragmentation, cuBLAS
#: workspaces and compilation buffers need the rest).
HEADROOM = 0.8


def activation_bytes_per_sequence(config: GPTConfig, context_tokens: int | None = None) -> int:
    """Bytes of activations one sequence keeps for backward (see the module docstring)."""
    t = config.context_tokens if context_tokens is None else context_tokens
    # Korthikanti et al. 2022 eq. 1 (flash attention) + QK-norm and rotary + fp32 under autocast
    per_layer = (34 + 8 + 8) * t * config.d_model
    logits = 10 * t * config.vocab_size  # log-softmax (fp32), its gradient, the bf16 logits' gradient
    return config.n_layers * per_layer + logits


def static_bytes(n_params_total: int, n_taus: int) -> int:
    """Bytes of weights, gradients, AdamW moments, EWA copies and the evaluation model."""
    return (20 + 4 * n_taus) * n_params_total


def choose_micro_batch(local_batch: int, free_bytes: float, bytes_per_sequence: float, *,
                       headroom: float = HEADROOM) -> int:
    """The largest divisor of ``local_batch`` whose activations fit in ``headroom·free_bytes``
    (at least 1: a device that holds less is told by the out-of-memory error itself)."""
    if isinstance(local_batch, bool) or not isinstance(local_batch, int) or local_batch < 1:
        raise ConfigError("local_batch", local_batch, "must be a positive integer")
    if not bytes_per_sequence > 0:
        raise ConfigError("bytes_per_sequence", bytes_per_sequence, "must be positive")
    fits = int(max(0.0, headroom * free_bytes) // bytes_per_sequence)
    return max(d for d in range(1, local_batch + 1) if local_batch % d == 0 and (d <= fits or d == 1))


#: Messages of errors that are an allocation failing on the device, whatever their type: near
#: the memory ceiling cuBLAS, cuDNN or an attention kernel's workspace can fail first, and they
#: raise a plain ``RuntimeError`` rather than ``torch.OutOfMemoryError``.
OUT_OF_MEMORY_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
                          "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE", "CUFFT_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from, as ``torch.compile`` wraps them) is the
    device running out of memory: ``torch.OutOfMemoryError`` or a ``RuntimeError`` that says so."""
    import torch

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, torch.OutOfMemoryError):
            return True
        if isinstance(exc, RuntimeError) and any(m in str(exc) for m in OUT_OF_MEMORY_MESSAGES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def split_for_gns(local_batch: int, micro: int) -> int:
    """The micro-batch that lets the noise scale be measured (two passes at least): ``micro``
    where it already splits the batch, else the largest divisor at most half of it (1 for a
    batch of one sequence, which cannot be split)."""
    if micro < local_batch or local_batch < 2:
        return micro
    return smaller_micro_batch(local_batch, local_batch)


def smaller_micro_batch(local_batch: int, micro: int) -> int | None:
    """The micro-batch after an out-of-memory error: the largest divisor of ``local_batch`` at
    most half of ``micro`` (``None`` when ``micro`` is already 1)."""
    if micro <= 1:
        return None
    return max(d for d in range(1, micro // 2 + 1) if local_batch % d == 0)
