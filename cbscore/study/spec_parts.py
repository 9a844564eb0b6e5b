"""The parts of a study spec (:mod:`cbscore.study.spec`): its learning-rate search, its settings
``(model, D)`` as written and as resolved, and the checks they share, each raising
:class:`~cbscore.errors.ConfigError` naming the field and the value."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cbscore.errors import ConfigError

SEARCH_KINDS = ("grid", "chained", "optuna")
#: Search kinds whose trials each run one named learning rate of the cell (the planner starts them;
#: Optuna's are asked for).
RATE_KINDS = ("grid", "chained")
#: What a chained search's reference cell runs (:attr:`SearchSpec.reference_rates`).
REFERENCE_RATES = ("grid", "bracket")
#: What a settled chained cell hands on to centre its neighbour (:attr:`SearchSpec.chain_centre`).
CHAIN_CENTRES = ("best", "vertex")
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
    chain_centre: str = "best"
    """Chained search (issue 40, "past 3×"): what a settled cell hands on to centre the next one.
    ``best`` (the default): the geometric mean over seeds of each seed's best discrete rate;
    ``vertex``: the continuous optimum, the vertex of the parabola in ``ln η`` the estimator fits
    across the cell's rates (curvature shared along the chain; the reference cell's from its final
    losses), :mod:`cbscore.study.chained`. With ``local_exponent`` it follows an optimal rate that
    falls past a peak (simulated, lab noise, 200 studies, paper-chinchilla: 3.40× the oracle
    precision-adjusted under the ``peak`` law, 3.72× off) but stays above 3× (docs/results/cheaper-search/chained/)."""
    local_exponent: bool = False
    """Chained search (issue 40, "past 3×"): ``true`` centres a cell with the slope of ``ln η_opt``
    against ``ln B`` between the two cells before it in the chain (clamped to [-0.5, 1]) instead of
    ``chain_exponent``, once both handed on an optimum; ``false`` (the default): ``chain_exponent``
    everywhere. Meant with ``chain_centre: vertex`` (on best discrete rates its slope is 0 or ±1)."""
    order: str = "predicted"
    """Grid search: the order a cell starts its rates in. ``predicted`` (the default): nearest the
    rate predicted from the setting's measured cells first (``cbscore.study.lr_predict``), so the
    cell's best crosses early and the far rates, started later, stop at the prune margin past it
    instead of running to their own crossing; every rate still runs and the fit reads the same
    crossings (simulated: 9-11% fewer tokens, B* on the full grid, docs/results/cheaper-search/).
    ``grid``: ascending, as the spec lists them. ``experimental.predict`` and
    ``experimental.prune_at_equal_tokens`` always order by the prediction."""

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
        if self.chain_centre not in CHAIN_CENTRES:
            raise ConfigError("search.chain_centre", self.chain_centre, f"must be one of {', '.join(CHAIN_CENTRES)}")
        if not isinstance(self.local_exponent, bool):
            raise ConfigError("search.local_exponent", self.local_exponent, "must be true or false")
        if self.reference_rates not in REFERENCE_RATES:
            raise ConfigError("search.reference_rates", self.reference_rates,
                              f"must be one of {', '.join(REFERENCE_RATES)}")
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
class ExperimentalSpec:
    """Rules that failed issue 40's criteria (docs/results/cheaper-search/): kept for the simulator
    and for studies that ran with them, off by default, absent from the Launch page and the presets
    (a spec's ``experimental:`` mapping)."""

    predict: bool = False
    """Grid search: run each cell's predicted best rate first (``cbscore.study.lr_predict``: the
    best rates of the setting's measured cells fitted in log B, Adam's √B rule before two are
    known), its neighbours next, and add no rate once the optimum is bracketed and the fit's window
    around it is run; ``search.lrs`` (with ``search.lr_extensions``) stays the set of allowed rates.
    Experimental: 3.6-4.4× the oracle at σ = 0, dearer than ``search.kind: chained`` for the same B*
    (issue 40; docs/results/cheaper-search/chained/)."""
    lr_prior: float | None = None
    """Grid search: the best rate predicted for a cell before any cell of its setting (or any
    study's reference cell) is measured; ``None`` takes the grid's geometric middle. Orders the
    first cell's rates (``search.order: predicted``) and picks ``predict``'s first three.
    Experimental: it saves nothing (issue 40; docs/results/cheaper-search/prior/); the paper presets
    once set 0.00316, the single rate of the paper's released sweep configs (Zhang et al. 2025,
    github.com/hlzhang109/critical-batch-size, ``configs/critical-bs/``)."""
    prune_at_equal_tokens: bool = False
    """Stop a trial as ``pruned`` before the cell's best has crossed when, at the same step, its
    held-out loss trails the cell's leader by more than ``equal_token_margin`` nats; its steps to
    target are projected (``cbscore.study.equal_tokens``). Experimental: B* off the truth by up to
    1.1% at zero noise, failing criterion 1 (issue 40; docs/results/cheaper-search/chained/)."""

    def __post_init__(self) -> None:
        if not isinstance(self.predict, bool):
            raise ConfigError("experimental.predict", self.predict, "must be true or false")
        if not isinstance(self.prune_at_equal_tokens, bool):
            raise ConfigError("experimental.prune_at_equal_tokens", self.prune_at_equal_tokens, "must be true or false")
        if self.lr_prior is not None:
            _positive_float("experimental.lr_prior", self.lr_prior)

    @classmethod
    def from_dict(cls, value: Any) -> ExperimentalSpec:
        if not isinstance(value, Mapping):
            raise ConfigError("experimental", value, "must be a mapping of fields")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"experimental.{unknown[0]}", value[unknown[0]],
                              f"is not an experimental field (known: {', '.join(sorted(known))})")
        return cls(**dict(value))


#: Fields that moved into ``experimental:`` (issue 40), by the place a spec from before gave them.
MOVED_TO_EXPERIMENTAL = {"search.predict": "predict", "search.lr_prior": "lr_prior",
                         "prune_at_equal_tokens": "prune_at_equal_tokens"}


def move_experimental(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A spec's fields (a mapping, or ``replace``'s changes) with the rules given at their old place
    (``search.predict``, ``search.lr_prior``, top-level ``prune_at_equal_tokens``) moved into
    ``experimental``, so a spec written before issue 40 loads and plans as it did; each move warns
    (a ``FutureWarning``, shown by default) naming the field and its new place."""
    import warnings

    out = dict(fields)
    moved: dict[str, Any] = {}
    search = out.get("search")
    if isinstance(search, Mapping):
        search = dict(search)
        for key in ("predict", "lr_prior"):
            if key in search:
                moved[f"search.{key}"] = search.pop(key)
        out["search"] = search
    if "prune_at_equal_tokens" in out:
        moved["prune_at_equal_tokens"] = out.pop("prune_at_equal_tokens")
    if not moved:
        return out
    block = out.get("experimental")
    if isinstance(block, ExperimentalSpec):
        block = dataclasses.asdict(block)
    elif block is None:
        block = {}
    elif not isinstance(block, Mapping):
        raise ConfigError("experimental", block, "must be a mapping of fields")
    block = dict(block)
    for old, value in moved.items():
        new = MOVED_TO_EXPERIMENTAL[old]
        if new in block and block[new] != value:
            raise ConfigError(old, value, f"moved to experimental.{new}, which the spec also sets to {block[new]!r}; "
                                          "give it once, there")
        block[new] = value
        warnings.warn(f"{old} moved to experimental.{new} (issue 40: a rule that failed the criteria, "
                      "docs/results/cheaper-search/); read from its old place this time", FutureWarning, stacklevel=3)
    out["experimental"] = block
    return out


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
    for key in unknown:
        if f"search.{key}" in MOVED_TO_EXPERIMENTAL:
            raise ConfigError(f"search.{key}", value[key], f"moved to experimental.{key} (issue 40)")
    if unknown:
        raise ConfigError(f"search.{unknown[0]}", value[unknown[0]], f"is not a search field (known: {', '.join(sorted(known))})")
    return SearchSpec(**dict(value))
