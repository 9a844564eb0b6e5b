"""Steps to target under horizon-bound schedules: WSD decay branches and cosine families.

Under a constant rate with an averaged (EWA) read-out any run can stop at the target (Zhang et al.
2025, §3.1). Under ``cosine`` (Loshchilov & Hutter 2017, arXiv 1608.03983) and ``wsd`` (Hu et al.
2024, arXiv 2404.06395) the rate decays to a floor at the run's own end, so a run's loss at step
``s`` depends on where it was told to end: the steps to target are the shortest *horizon* whose
run, decayed to the floor at that horizon, reaches the target.

- ``wsd``: one stable run (the ``constant`` schedule after the warm-up: the WSD rates before any
  decay) keeps a snapshot at each branch point ``s``; a *decay branch* continues it for
  ``k = round(f·H)`` steps with the rate falling linearly to the floor, ``H = s + k`` (Hägele et al.
  2024, arXiv 2405.18392, §3: a cool-down from a checkpoint of one constant run). It is exactly
  the run trained straight to ``H`` on ``wsd`` with decay fraction ``f`` (same seed, data order and
  rates at every step; ``tests/cbscore/test_decay.py``). The stable run's own EWA history gives the
  ``constant_ewa`` steps to target from the same run.
- ``cosine``: every step's rate depends on ``H``, so no prefix is shared: a *family* of runs, one
  per horizon, each trained to its own end.

Modules: :mod:`._horizons` (the horizons of a cell, :class:`DecayPoint`), :mod:`._configs` (the
trainer configs: :func:`stable_config`, :func:`decay_branch_config`, :func:`cosine_config`),
:mod:`._readout` (:func:`steps_from_horizons`: the first horizon at the target).
"""

from cbscore.decay._configs import cosine_config, decay_branch_config, stable_config
from cbscore.decay._horizons import DecayPoint, cosine_horizons, horizon_tokens, wsd_points
from cbscore.decay._readout import HorizonCrossing, steps_from_horizons

__all__ = ["DecayPoint", "HorizonCrossing", "cosine_config", "cosine_horizons", "decay_branch_config", "horizon_tokens",
           "stable_config", "steps_from_horizons", "wsd_points"]
