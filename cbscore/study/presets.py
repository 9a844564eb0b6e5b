"""Named study presets, shipped as YAML files in ``cbscore/presets/``."""

from __future__ import annotations

from pathlib import Path

from cbscore.errors import ConfigError
from cbscore.study.spec import StudySpec

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"

#: ``demo`` runs end to end on a 2-core CPU in minutes (``local-demo``: a local-CBS study, as fast), ``reproduce`` shows the paper's finding in under two
#: hours there (``reproduce-gpu``: larger, for one GPU); the ``paper-*`` studies are the paper's, for GPUs;
#: the ``ablation-*`` studies are the paper's ablations (schedule, context length, width against depth)
#: for a 2-core CPU, each with a ``-gpu`` variant.
PRESET_NAMES = ("demo", "local-demo", "reproduce", "reproduce-gpu", "paper-chinchilla", "paper-fixed-n",
                "paper-fixed-d", "ablation-schedule", "ablation-schedule-gpu", "ablation-context", "ablation-context-gpu",
                "ablation-width-depth", "ablation-width-depth-gpu")


def load_preset(preset: str, /, **overrides) -> StudySpec:
    """The preset's spec, with fields replaced by ``overrides`` (e.g. a new ``name``)."""
    if preset not in PRESET_NAMES:
        raise ConfigError("preset", preset, f"is not a study preset (known: {', '.join(PRESET_NAMES)})")
    spec = StudySpec.from_yaml(PRESET_DIR / f"{preset}.yaml")
    return spec.replace(**overrides) if overrides else spec
