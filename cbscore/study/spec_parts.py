"""The parts of a study spec (:mod:`cbscore.study.spec`): its learning-rate search, its settings
``(model, D)`` as written and as resolved, and the checks they share, each raising
:class:`~cbscore.errors.ConfigError` naming the field and the value."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from cbscore.errors import ConfigError

SEARCH_KINDS = ("grid", "chained", "optuna")
#: Search kinds whose trials each run one named learning rate of the cell (the planner starts them;
#: Optuna's are asked for).
RATE_KINDS = ("grid", "chained")
#: What a chained search's reference cell runs (:attr:`SearchSpec.reference_rates`).
REFERENCE_RATES = ("grid", "bracket")
#: Orders a grid cell may start its rates in (:attr:`SearchSpec.order`).
SEARCH_ORDERS = ("predicted", "grid")

#: The paper's learning-rate grid (Zhang et al. 2025, §3.1).
PAPER_LRS = (1e-3, 3.16e-3, 6.32e-3, 1e-2, 3.16e-2)


def _positive_int(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(field_name, value, "must be a positive integer")
    return value


def _positive_float(field_name: str, value: Any) -> float:
    # A chained comparison, not math.isfinite: an int past a float's range (10**400) overflows that.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= sys.float_info.max:
        raise ConfigError(field_name, value, "must be a positive finite number")
    return float(value)


def format_tokens(tokens: float) -> str:
    """Short human form of a token count: 2000000 -> '2M', 1741000000 -> '1.741B'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if tokens >= scale:
            return f"{tokens / scale:.4g}{unit}"
    return f"{int(tokens)}"


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
    """How the hyper-parameters of each cell ``(setting, batch size)`` are searched."""

    kind: str = "grid"
    """``grid`` (every learning rate of ``lrs`` in every cell), ``chained`` (the reference cell runs
    ``lrs``; every other cell three rates centred on its neighbour's best, :mod:`cbscore.study.chained`)
    or ``optuna`` (a sampler proposes ``n_trials``)."""
    lrs: tuple[float, ...] = PAPER_LRS
    """Peak learning rates of the grid (``kind='grid'``; with ``kind='chained'`` the reference cell's
    rates); the paper's grid by default."""
    n_trials: int = 4
    """Trials per cell proposed by Optuna (``kind='optuna'``)."""
    lr_min: float = 1e-4
    """Lower bound of the Optuna learning-rate search (log-uniform)."""
    lr_max: float = 1e-1
    """Upper bound of the Optuna learning-rate search (log-uniform)."""
    parallel_per_cell: int = 2
    """Optuna trials of one cell running at once (the sampler learns from finished ones)."""
    lr_extensions: int = 2
    """Grid search: rates a cell may add past each edge of ``lrs`` when its best rate sits at that
    edge (the next rate continues the grid's outermost ratio); 0 keeps the grid as given. Cells
    still at an edge are named in the fit's notes (DESIGN.md §1)."""
    predict: bool = False
    """Experimental (issue 40: 3.6-4.4× the oracle at σ = 0, dearer than ``kind: chained`` for the
    same B*; docs/results/cheaper-search/chained/). Grid search: run each cell's predicted best rate first (``cbscore.study.lr_predict``: the
    best rates of the setting's measured cells fitted in log B, Adam's √B rule before two are
    known), its neighbours next, and add no rate once the optimum is bracketed and the fit's window
    around it is run. ``lrs`` (with ``lr_extensions``) stays the set of allowed rates."""
    lr_prior: float | None = None
    """Experimental (issue 40: it saves nothing; the paper presets dropped it). Grid search: the best rate predicted for a cell before any cell of its setting (or any
    study's reference cell) is measured; ``None`` takes the grid's geometric middle. The paper
    presets set 0.00316, the single rate of the paper's released sweep configs at every batch size
    (Zhang et al. 2025, github.com/hlzhang109/critical-batch-size, ``configs/critical-bs/``:
    ``optimizer.learning_rate: 3.16e-3`` with β2 and τ from its table, ``recipe: paper_table``).
    Orders the first cell's rates (``order: predicted``) and picks ``predict``'s first three."""
    chain_exponent: float = 0.5
    """Chained search: a cell's centre rate is its neighbour's best rate (the neighbour towards
    B_ref) times ``(B/B_neighbour)^chain_exponent``; 0.5 is Adam's square-root rule (Malladi et al.
    2022, arXiv 2205.10287)."""
    bracket_ratio: float = 2.0
    """Chained search: a cell runs its centre rate ``c`` and ``c/ratio``, ``c·ratio``; an extension
    continues by the same ratio."""
    extension_gain: float = 0.1
    """Chained search: a cell adds the next rate past an edge only when that edge's steps to target
    (mean of ln S over seeds) beat its inner neighbour's by more than this fraction. With the lab's
    learning-rate curvature (k = 0.198: a rate a factor 2 off needs about 1.1× the steps) an optimum
    at the centre leaves both edges about 10% behind."""
    max_extensions: int = 2
    """Chained search: rates a cell may add past its edges, both sides together."""
    reference_rates: str = "bracket"
    """Chained search: what the reference cell runs. ``bracket`` (the default): three rates
    ``c/bracket_ratio, c, c·bracket_ratio`` around the geometric middle ``c`` of ``lrs``; ``grid``:
    every rate of ``lrs``. Either is extended past an edge where a seed's best rate sits there
    (``lr_extensions``). Simulated under the lab's noise, ``bracket`` is 3.07-3.26× the oracle
    precision-adjusted on the paper presets, ``grid`` 3.22-3.71× (docs/results/cheaper-search/chained/)."""
    bracket_min_batch_size: int | None = None
    """Chained search (issue 40, "past 3×"): cells below this batch size (sequences), the reference
    cell excepted, start with ``narrow_rates`` rates instead of the three-rate bracket; ``None`` (the
    default): every cell is bracketed (docs/results/cheaper-search/chained/, "Past 3×")."""
    narrow_rates: int = 3
    """Chained search: rates a cell below ``bracket_min_batch_size`` starts with: 2 (``c/√ratio`` and
    ``c·√ratio``, read through the curvature the setting's bracketed cells share), 1 (the centre
    alone) or 3 (the bracket: no cell is narrow)."""
    order: str = "predicted"
    """Grid search: the order a cell starts its rates in. ``predicted`` (the default): nearest the
    rate predicted from the setting's measured cells first (``cbscore.study.lr_predict``), so the
    cell's best crosses early and the far rates, started later, stop at the prune margin past it
    instead of running to their own crossing; every rate still runs and the fit reads the same
    crossings (simulated: 9-11% fewer tokens, B* on the full grid, docs/results/cheaper-search/).
    ``grid``: ascending, as the spec lists them. ``predict`` and ``prune_at_equal_tokens`` always
    order by the prediction."""

    def __post_init__(self) -> None:
        if self.kind not in SEARCH_KINDS:
            raise ConfigError("search.kind", self.kind, f"must be one of {', '.join(SEARCH_KINDS)}")
        object.__setattr__(self, "lrs", tuple(self.lrs))
        if self.kind in RATE_KINDS and not self.lrs:
            raise ConfigError("search.lrs", list(self.lrs), "must list at least one learning rate")
        for lr in self.lrs:
            _positive_float("search.lrs", lr)
        if len(set(self.lrs)) != len(self.lrs):
            raise ConfigError("search.lrs", list(self.lrs), "must not repeat a learning rate")
        _positive_int("search.n_trials", self.n_trials)
        _positive_int("search.parallel_per_cell", self.parallel_per_cell)
        ext = self.lr_extensions
        if isinstance(ext, bool) or not isinstance(ext, int) or not 0 <= ext <= 8:
            raise ConfigError("search.lr_extensions", ext, "must be an integer in [0, 8]")
        if not isinstance(self.predict, bool):
            raise ConfigError("search.predict", self.predict, "must be true or false")
        if self.lr_prior is not None:
            _positive_float("search.lr_prior", self.lr_prior)
            if self.kind in RATE_KINDS and self.lrs:
                from cbscore.study.lr_predict import allowed_rates

                allowed = allowed_rates(self.lrs, self.lr_extensions)
                if not allowed[0] <= self.lr_prior <= allowed[-1]:
                    raise ConfigError("search.lr_prior", self.lr_prior,
                                      f"must lie within the allowed rates [{allowed[0]:g}, {allowed[-1]:g}] "
                                      "(search.lrs and search.lr_extensions past each edge)")
        _positive_float("search.chain_exponent", self.chain_exponent)
        if not self.chain_exponent <= 2:
            raise ConfigError("search.chain_exponent", self.chain_exponent, "must be a number in (0, 2]")
        ratio = self.bracket_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 1.1 <= ratio <= 10:
            raise ConfigError("search.bracket_ratio", ratio, "must be a number in [1.1, 10]")
        gain = self.extension_gain
        if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not 0 <= gain <= 1:
            raise ConfigError("search.extension_gain", gain, "must be a number in [0, 1]")
        ext = self.max_extensions
        if isinstance(ext, bool) or not isinstance(ext, int) or not 0 <= ext <= 8:
            raise ConfigError("search.max_extensions", ext, "must be an integer in [0, 8]")
        floor = self.bracket_min_batch_size
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int) or floor < 1):
            raise ConfigError("search.bracket_min_batch_size", floor, "must be a positive integer or null")
        if isinstance(self.narrow_rates, bool) or self.narrow_rates not in (1, 2, 3):
            raise ConfigError("search.narrow_rates", self.narrow_rates, "must be 1, 2 or 3")
        if self.reference_rates not in REFERENCE_RATES:
            raise ConfigError("search.reference_rates", self.reference_rates,
                              f"must be one of {', '.join(REFERENCE_RATES)}")
        if self.kind == "chained" and self.predict:
            raise ConfigError("search.predict", self.predict, "applies to kind grid only (a chained search "
                                                              "centres each cell on its neighbour's best rate)")
        if self.order not in SEARCH_ORDERS:
            raise ConfigError("search.order", self.order, f"must be one of {', '.join(SEARCH_ORDERS)}")
        _positive_float("search.lr_min", self.lr_min)
        _positive_float("search.lr_max", self.lr_max)
        if self.lr_min >= self.lr_max:
            raise ConfigError("search.lr_max", self.lr_max, f"must be above search.lr_min={self.lr_min}")

    @property
    def runs_rates(self) -> bool:
        """Whether each trial runs one learning rate the planner names (``grid``, ``chained``)."""
        return self.kind in RATE_KINDS

    def trials_per_cell(self, reference: bool = False) -> int:
        """Learning rates (or Optuna trials) of one cell as planned, before any extension; a chained
        search runs ``lrs`` in the reference cell and three rates elsewhere."""
        if self.kind == "chained" and (not reference or self.reference_rates == "bracket"):
            return 3
        return len(self.lrs) if self.kind in RATE_KINDS else self.n_trials


@dataclass(frozen=True, kw_only=True)
class SettingSpec:
    """One ``(model, D)`` of a ``custom`` study."""

    model: str
    """Model preset name (``cbs models`` lists them)."""
    tokens: int
    """Training tokens D of the setting (the reference budget)."""


@dataclass(frozen=True, kw_only=True)
class Setting:
    """A resolved setting ``(N, D)`` of a study, with a stable id."""

    setting_id: str
    """Stable id, e.g. ``tiny-0.4M_D2M``; unique within the study."""
    model: str
    """Model preset name."""
    n_params: int
    """Non-embedding parameters N (``12·L·d²``)."""
    tokens: int
    """Training tokens D: the reference runs' budget."""
    flops_per_token: float
    """Training FLOPs per token of the preset at the study's context (PaLM appendix B)."""


def _setting_from_dict(value: Any, index: int) -> SettingSpec:
    if not isinstance(value, Mapping) or set(value) != {"model", "tokens"}:
        raise ConfigError(f"settings[{index}]", value, "must be a mapping with exactly the keys model and tokens")
    return SettingSpec(model=value["model"], tokens=value["tokens"])


def _search_from_dict(value: Mapping[str, Any]) -> SearchSpec:
    known = {f.name for f in dataclasses.fields(SearchSpec)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"search.{unknown[0]}", value[unknown[0]], f"is not a search field (known: {', '.join(sorted(known))})")
    return SearchSpec(**dict(value))
