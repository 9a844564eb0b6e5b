"""Model shapes: :class:`GPTConfig` and the named presets, torch-free.

Kept apart from :mod:`cbscore.model.gpt` so that study planning, the CLI and the web app can name,
count and cost models without importing torch. ``N = 12·L·C²`` non-embedding parameters (Kaplan
et al. 2020, §2.1); training FLOPs per token ``6·(N + C·V) + 12·L·C·T``: the block matmuls, the
output head and attention (Chowdhery et al. 2022, PaLM, appendix B; Kaplan et al. 2020, table 1).
See :mod:`cbscore.model.gpt` for the full accounting.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from cbscore.errors import ConfigError

#: Vocabulary size V assumed where none is given: the default byte-level BPE of
#: :class:`cbscore.data.DataConfig` (the built-in corpus).
DEFAULT_VOCAB_SIZE = 8192

#: The LM head's rows are padded to a multiple of this: a (M, C) × (C, V) matmul whose V is not a
#: multiple of 64-128 falls off the tensor cores' tile sizes (nanoGPT pads GPT-2's 50,257 to
#: 50,304 for the same reason, ~25% faster there). The extra rows are never a target.
VOCAB_MULTIPLE = 128


def padded_vocab_size(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple`` (GPT-NeoX's 50,277 → 50,304;
    the built-in 8,192 stays)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise ConfigError("vocab_size", vocab_size, "must be a positive integer")
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Shape of one model; every module receives the whole config (nanoGPT style)."""

    d_model: int
    """Residual width C."""
    n_layers: int
    """Number of transformer blocks L."""
    n_heads: int
    """Attention heads H; ``d_model`` must be a multiple of it."""
    vocab_size: int = DEFAULT_VOCAB_SIZE
    """Vocabulary size V in tokens (input and output embeddings, untied; taken as is, unpadded)."""
    context_tokens: int = 512
    """Longest sequence the rotary tables are built for, in tokens (the paper: 512)."""
    rope_base: float = 10000.0
    """Base of the rotary frequencies (Su et al. 2021)."""

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layers", "n_heads", "vocab_size", "context_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, value, "must be a positive integer")
        if self.d_model % self.n_heads:
            raise ConfigError("n_heads", self.n_heads, f"must divide d_model={self.d_model}")
        if (self.d_model // self.n_heads) % 2:
            raise ConfigError("n_heads", self.n_heads, "must leave an even head width for rotary embeddings")

    @property
    def n_params(self) -> int:
        """Non-embedding parameters N = 12·L·C² (block matrices only; Kaplan et al. 2020)."""
        return 12 * self.n_layers * self.d_model**2

    def flops_per_token(self, context_tokens: int | None = None) -> float:
        """Training FLOPs per token, ``6·(N + C·V) + 12·L·C·T``.

        Forward 2 and backward 4 FLOPs per weight of every matmul: the blocks (N) and the output
        head (C·V); attention scores and values add 12·L·C·T at context T (Chowdhery et al. 2022,
        PaLM, appendix B; Kaplan et al. 2020, table 1, whose forward count lists the head as
        "De-embed, 2·d_model·n_vocab"). The input embedding is a lookup, not FLOPs.
        """
        t = self.context_tokens if context_tokens is None else context_tokens
        matmul_weights = self.n_params + self.d_model * self.vocab_size
        return float(6 * matmul_weights + 12 * self.n_layers * self.d_model * t)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class Preset:
    """A named model shape; ``context_tokens`` is the length it is usually trained at."""

    name: str
    d_model: int
    n_layers: int
    n_heads: int
    context_tokens: int

    @property
    def n_params(self) -> int:
        """Non-embedding parameters N = 12·L·C²."""
        return 12 * self.n_layers * self.d_model**2

    def config(self, *, vocab_size: int = DEFAULT_VOCAB_SIZE, context_tokens: int | None = None) -> GPTConfig:
        return GPTConfig(
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            vocab_size=vocab_size,
            context_tokens=self.context_tokens if context_tokens is None else context_tokens,
        )

    def flops_per_token(self, context_tokens: int | None = None, *, vocab_size: int = DEFAULT_VOCAB_SIZE) -> float:
        """Training FLOPs per token, 6·(N + C·V) + 12·L·C·T (:meth:`GPTConfig.flops_per_token`);
        pass the data's ``vocab_size`` (the default is the built-in corpus's BPE)."""
        return self.config(vocab_size=vocab_size, context_tokens=context_tokens).flops_per_token()


def _presets(*rows: tuple[str, int, int, int, int]) -> dict[str, Preset]:
    return {name: Preset(name=name, d_model=d, n_layers=layers, n_heads=h, context_tokens=t)
            for name, d, layers, h, t in rows}


#: Named model shapes. The paper's five (DESIGN.md §1; N = 12·L·d² matches each name), and small
#: members of the same family (same block, head width 32-64) that train on a laptop CPU.
PRESETS: dict[str, Preset] = _presets(
    # name          d_model  layers  heads  usual context
    ("tiny-0.06M", 48, 2, 1, 128),  # N = 55,296 (22 tokens per parameter at 1.2M: the paper's regime on a CPU)
    ("tiny-0.1M", 64, 2, 2, 128),  # N = 98,304
    ("tiny-0.3M", 96, 3, 3, 128),  # N = 331,776 (between the two: the reproduce preset's N axis)
    ("tiny-0.8M", 128, 4, 4, 128),  # N = 786,432 (the CPU throughput floor's shape)
    ("tiny-3.1M", 256, 4, 4, 128),  # N = 3,145,728
    ("tiny-6.3M", 256, 8, 8, 256),  # N = 6,291,456
    # Equal N by width and by depth (the ablation-width-depth presets): tiny-0.8M's N as
    # 16 narrow layers or 1 wide one, tiny-6.3M's as 2 wide or 32 narrow ones.
    ("tiny-deep-0.8M", 64, 16, 2, 128),  # N = 786,432
    ("tiny-wide-0.8M", 256, 1, 4, 128),  # N = 786,432
    ("tiny-wide-6.3M", 512, 2, 8, 256),  # N = 6,291,456
    ("tiny-deep-6.3M", 128, 32, 4, 256),  # N = 6,291,456
    ("85M", 768, 12, 12, 512),  # N = 84,934,656
    ("151M", 1024, 12, 16, 512),  # N = 150,994,944
    ("302M", 1024, 24, 16, 512),  # N = 301,989,888
    ("604M", 2048, 12, 16, 512),  # N = 603,979,776
    ("1.2B", 2048, 24, 32, 512),  # N = 1,207,959,552
)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ConfigError naming the field ``model`` otherwise."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ConfigError("model", name, f"is not a model preset (known: {', '.join(PRESETS)})") from None
