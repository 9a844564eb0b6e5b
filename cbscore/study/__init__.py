"""Studies: the spec a researcher writes, its presets, the pure planner and the cost estimate.

See ``docs/ARCHITECTURE.md`` ("Study spec and planner") for how the workers use it.
"""

from cbscore.study.budgets import cell_budget_tokens, planned_budget, spent_tokens
from cbscore.study.cell_trials import build_train_config, cell_id, trial_from_ask
from cbscore.study.estimate import ComputeEstimate, SettingEstimate, estimate, measure_rates, measure_tokens_per_s
from cbscore.study.kinds import grid_tokens, grid_trials, plan
from cbscore.study.local_plan import LocalSnapshots
from cbscore.study.local_spec import LocalSpec
from cbscore.study.plan_result import (
                                       AskRequest,
                                       CellState,
                                       Plan,
                                       ended_trials,
                                       skipped_cells,
                                       skipped_trials,
                                       status_counts,
)
from cbscore.study.presets import PRESET_NAMES, load_preset
from cbscore.study.spec import StudySpec
from cbscore.study.spec_parts import PAPER_LRS, SearchSpec, Setting, SettingSpec, format_tokens
from cbscore.study.trials import ACTIVE, STATUSES, TERMINAL, TrialRecord, TrialSpec

__all__ = [
    "ACTIVE", "AskRequest", "CellState", "ComputeEstimate", "LocalSnapshots", "LocalSpec", "PAPER_LRS", "PRESET_NAMES", "Plan", "STATUSES",
    "SearchSpec", "Setting", "SettingEstimate", "SettingSpec", "StudySpec", "TERMINAL", "TrialRecord",
    "TrialSpec", "build_train_config", "cell_budget_tokens", "cell_id", "ended_trials", "estimate", "format_tokens",
    "grid_tokens", "grid_trials", "load_preset", "measure_rates", "measure_tokens_per_s", "plan", "planned_budget",
    "skipped_cells", "skipped_trials", "spent_tokens", "status_counts", "trial_from_ask",
]
