"""Model presets as the study layer sees them: a name, N and training FLOPs per token.

The presets themselves live in :mod:`cbscore.model.config`; this module only looks them up so that a
study spec names an unknown model with a clear message.
"""

from __future__ import annotations

from functools import lru_cache

from cbscore.errors import ConfigError


@lru_cache(maxsize=1)
def preset_names() -> tuple[str, ...]:
    from cbscore.model.config import PRESETS

    return tuple(PRESETS)


def check_model(field_name: str, name: object) -> None:
    """Raise a ConfigError naming ``field_name`` when ``name`` is not a model preset."""
    names = preset_names()
    if not isinstance(name, str) or name not in names:
        raise ConfigError(field_name, name, f"is not a model preset (known: {', '.join(names)})")


@lru_cache(maxsize=64)
def model_info(name: str, context_tokens: int, vocab_size: int | None = None) -> tuple[int, float]:
    """``(N, FLOPs per token)`` of a preset: N = 12·L·d² non-embedding parameters, and the
    training FLOPs per token 6·(N + d·V) + 12·L·d·T (PaLM, Chowdhery et al. 2022, appendix B),
    output head included. ``vocab_size`` is the data's V (``DataConfig.expected_vocab_size``);
    ``None`` = the default BPE's 8192."""
    from cbscore.model.config import DEFAULT_VOCAB_SIZE, PRESETS

    preset = PRESETS[name]
    vocab = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
    return preset.n_params, float(preset.flops_per_token(context_tokens, vocab_size=vocab))
