"""Local critical batch size: the CBS *during* a run (Merrill et al. 2025, arXiv 2505.23971).

- :mod:`._branches`: the branches of a study (:class:`BranchSpec`, :func:`branch_config`,
  :func:`lr_factor`), trained by :func:`cbscore.train.trainer.train` from a base trial's snapshot;
- :mod:`._readout`: Merrill's rule and the lab's noise-aware variant (:func:`merrill_local_cbs`,
  :func:`noise_aware_local_cbs`, :class:`LocalCbsReadout`);
- :mod:`._curve`: the power law of the local CBS over tokens (:func:`fit_local_cbs_curve`);
- :mod:`._warmup`: the batch-size warm-up it recommends (:func:`plan_warmup`, :func:`schedule_warmup`,
  :class:`WarmupPlan`), its ``batch_schedule`` ready for ``TrainConfig.branch``;
- :mod:`._arms`: the warm-up run and its small- and large-batch controls at equal tokens
  (:func:`warmup_arms`, :func:`on_equal_token_grid`, :class:`WarmupArm`);
- :mod:`._study_readout`: a local study's readout as typed rows (:class:`LocalStudyReadout` per
  study, :class:`LocalCheckpoint`, :class:`LocalWarmup`, :class:`ArmsReadout`), ``to_json_dict()``
  its JSON.

Layer: numpy/scipy and :mod:`cbscore` only (no workers, app, MLflow, Celery or Optuna); every
result is a frozen dataclass with ``to_dict()`` where the study runner sends it as JSON.
"""

from cbscore.local._arms import ARM_ROLES, WarmupArm, equal_token_budget, on_equal_token_grid, warmup_arms
from cbscore.local._branches import AVERAGING, DEFAULT_MULTIPLIERS, LR_RULES, BranchSpec, branch_config, lr_factor
from cbscore.local._curve import LocalCbsCurve, fit_local_cbs_curve
from cbscore.local._readout import (
                                    Z_ONE_SIDED_95,
                                    LocalCbsReadout,
                                    WindowLoss,
                                    merrill_local_cbs,
                                    noise_aware_local_cbs,
                                    window_end_loss,
)
from cbscore.local._study_readout import (
    ArmComparison,
    ArmReadout,
    ArmSeed,
    ArmsReadout,
    BaseNoiseScale,
    LocalCheckpoint,
    LocalStudyReadout,
    LocalWarmup,
    SeedInterval,
)
from cbscore.local._warmup import WarmupPlan, plan_warmup, schedule_warmup

__all__ = [
    "ARM_ROLES", "AVERAGING", "DEFAULT_MULTIPLIERS", "LR_RULES", "Z_ONE_SIDED_95", "ArmComparison", "ArmReadout",
    "ArmSeed", "ArmsReadout", "BaseNoiseScale", "BranchSpec", "LocalCbsCurve", "LocalCbsReadout", "LocalCheckpoint",
    "LocalStudyReadout", "LocalWarmup", "SeedInterval", "WarmupArm", "WarmupPlan", "WindowLoss", "branch_config", "equal_token_budget",
    "fit_local_cbs_curve", "lr_factor", "merrill_local_cbs", "noise_aware_local_cbs", "on_equal_token_grid",
    "plan_warmup", "schedule_warmup", "warmup_arms", "window_end_loss",
]
