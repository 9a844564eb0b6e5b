"""Local critical batch size: the CBS *during* a run (Merrill et al. 2025, arXiv 2505.23971).

- :mod:`._branches`: the branches of a study (:class:`BranchSpec`, :func:`branch_config`,
  :func:`lr_factor`), trained by :func:`cbscore.train.train` from a base trial's snapshot;
- :mod:`._readout`: Merrill's rule and the lab's noise-aware variant (:func:`merrill_local_cbs`,
  :func:`noise_aware_local_cbs`, :class:`LocalCbsReadout`);
- :mod:`._curve`: the power law of the local CBS over tokens (:func:`fit_local_cbs_curve`);
- :mod:`._warmup`: the batch-size warm-up it recommends (:func:`plan_warmup`, :func:`schedule_steps`).
"""

from cbscore.local._branches import DEFAULT_MULTIPLIERS, LR_RULES, BranchSpec, branch_config, lr_factor

__all__ = ["DEFAULT_MULTIPLIERS", "LR_RULES", "BranchSpec", "branch_config", "lr_factor"]
