"""Gradient noise scale: unbiased two-batch estimates, token-based smoothing, the CBS forecast."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from cbscore.train.gns import (
    GnsTracker,
    forecast_b_noise,
    forecast_cbs,
    grad_sq_norm,
    grad_sq_norm_tensor,
    two_batch_estimates,
)

# ---- Gaussian least squares: the truth in closed form ------------------------------------
# Loss per example ½(xᵀw − y)², x ~ N(0, H) with H diagonal, y = xᵀw* + ε, ε ~ N(0, σ²),
# evaluated at w = w* + e. The per-example gradient is x(xᵀe − ε), so G = He, and since
# E[x xᵀ e eᵀ x xᵀ] = 2·He eᵀH + (eᵀHe)·H for Gaussian x,
#     |G|² = ‖He‖²,   tr Σ = tr E[g gᵀ] − |G|² = ‖He‖² + (eᵀHe + σ²)·tr H.
DIM, SIGMA = 8, 0.5
H_DIAG = torch.logspace(0, 1, DIM, dtype=torch.float64)  # eigenvalues 1 .. 10
E = 0.3 * torch.linspace(-1, 1, DIM, dtype=torch.float64) + 0.1  # w − w*


def _truth() -> tuple[float, float]:
    he = H_DIAG * E
    g2 = float(he @ he)
    trace = g2 + (float(E @ he) + SIGMA**2) * float(H_DIAG.sum())
    return g2, trace


def _draw(gen: torch.Generator, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs x ~ N(0, H) of shape (*shape, DIM) and noise ε ~ N(0, σ²) of shape ``shape``."""
    x = torch.randn(*shape, DIM, generator=gen, dtype=torch.float64) * H_DIAG.sqrt()
    eps = SIGMA * torch.randn(*shape, generator=gen, dtype=torch.float64)
    return x, eps


def test_two_batch_estimates_match_closed_form_on_gaussian_least_squares():
    steps, n_micro, b_small = 10_000, 8, 4
    b_big = n_micro * b_small
    x, eps = _draw(torch.Generator().manual_seed(0), (steps, n_micro, b_small))
    per_example = x * (x @ E - eps)[..., None]  # (steps, n, M, DIM): x(xᵀe − ε)
    micro = per_example.mean(2)  # (steps, n, DIM): micro-batch gradients
    full = micro.mean(1)  # (steps, DIM): full-batch gradients
    small_sq = micro.square().sum(-1)  # (steps, n)
    big_sq = full.square().sum(-1)  # (steps,)
    estimates = [two_batch_estimates(small_sq[t], float(big_sq[t]), b_small, b_big) for t in range(steps)]
    g2 = sum(e.g2 for e in estimates) / steps
    trace = sum(e.trace for e in estimates) / steps
    true_g2, true_trace = _truth()
    # standard errors of these means are ≈ 0.5%; the naive |G_big|² would be 16% high
    assert g2 == pytest.approx(true_g2, rel=0.03)
    assert trace == pytest.approx(true_trace, rel=0.03)
    assert float(big_sq.mean()) > 1.1 * true_g2


def test_accumulation_recipes_of_the_module_docstring_give_the_hand_computed_norms():
    torch.manual_seed(0)
    n_micro, b_small = 4, 3
    x, eps = _draw(torch.Generator().manual_seed(1), (n_micro, b_small))
    w_star = torch.randn(DIM, dtype=torch.float64)
    y = x @ w_star + eps  # (n, M)
    model = nn.Linear(DIM, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_((w_star + E)[None, :])
    params = list(model.parameters())

    def micro_loss(i: int) -> torch.Tensor:
        return 0.5 * (model(x[i]).squeeze(-1) - y[i]).square().mean()

    # by hand: per-example gradients x(xᵀe − ε)
    micro_hand = (x * (x @ E - eps)[..., None]).mean(1)  # (n, DIM)
    small_hand = micro_hand.square().sum(-1).tolist()
    big_hand = float(micro_hand.mean(0).square().sum())

    # recipe 1: a separate running mean of the micro-batch gradients
    acc = [torch.zeros_like(p) for p in params]
    small = []
    for i in range(n_micro):
        model.zero_grad(set_to_none=True)
        micro_loss(i).backward()
        small.append(grad_sq_norm_tensor(params))
        torch._foreach_add_(acc, [p.grad for p in params], alpha=1.0 / n_micro)
    for p, a in zip(params, acc):
        p.grad = a
    assert torch.stack(small).tolist() == pytest.approx(small_hand, rel=1e-10)
    assert grad_sq_norm(params) == pytest.approx(big_hand, rel=1e-10)

    # recipe 2: the trainer's (loss / n).backward(), the micro gradient as n·(after − before)
    model.zero_grad(set_to_none=True)
    small_diff = []
    before = [torch.zeros_like(p) for p in params]
    for i in range(n_micro):
        (micro_loss(i) / n_micro).backward()
        delta = torch._foreach_sub([p.grad for p in params], before)
        small_diff.append(n_micro**2 * sum(float(d.square().sum()) for d in delta))
        before = [p.grad.clone() for p in params]
    assert small_diff == pytest.approx(small_hand, rel=1e-9)
    assert grad_sq_norm(params) == pytest.approx(big_hand, rel=1e-10)

    g2, trace = two_batch_estimates(small, big_hand, b_small, n_micro * b_small)
    assert (g2, trace) == pytest.approx(two_batch_estimates(small_hand, big_hand, b_small, n_micro * b_small))


def test_estimates_are_exact_on_exact_expected_norms():
    g2, trace = 2.5, 40.0
    for b_small, b_big in ((1, 2), (4, 32), (16, 4096)):
        s_small = g2 + trace / b_small
        s_big = g2 + trace / b_big
        est = two_batch_estimates([s_small, s_small], s_big, b_small, b_big)
        assert est.g2 == pytest.approx(g2, rel=1e-12)
        assert est.trace == pytest.approx(trace, rel=1e-12)
    # S_small is the mean of the micro-batch norms; a tensor works like a list
    est = two_batch_estimates(torch.tensor([12.0, 8.0]), 3.5, 4, 8)  # S_small = 10
    # |G|² = (8·3.5 − 4·10)/4 = −3 (a noisy step may give a negative |G|²), tr Σ = 6.5/(1/8) = 52
    assert tuple(est) == pytest.approx((-3.0, 52.0))


def test_two_batch_estimates_refuses_big_not_larger_than_small():
    with pytest.raises(ValueError, match=r"b_big.*b_small=8.*but got 8"):
        two_batch_estimates([1.0], 1.0, 8, 8)
    with pytest.raises(ValueError, match=r"b_big.*b_small=8.*but got 4"):
        two_batch_estimates([1.0], 1.0, 8, 4)
    with pytest.raises(ValueError, match=r"b_small.*but got 0"):
        two_batch_estimates([1.0], 1.0, 0, 4)
    with pytest.raises(ValueError, match="small_sq_norms"):
        two_batch_estimates([], 1.0, 2, 4)


def test_two_batch_estimates_of_non_finite_norms_are_nan():
    for small, big in (([1.0, math.inf], 1.0), ([1.0, 2.0], math.nan), (torch.tensor([math.nan]), 1.0)):
        g2, trace = two_batch_estimates(small, big, 2, 4)
        assert math.isnan(g2) and math.isnan(trace)


# ---- smoothing ---------------------------------------------------------------------------


def test_first_update_returns_its_value_and_hand_computed_second():
    tracker = GnsTracker(half_life_tokens=1000)
    assert math.isnan(tracker.g2) and math.isnan(tracker.b_simple)
    tracker.update(1.0, 10.0, tokens=1000)  # decay 0.5
    assert (tracker.g2, tracker.trace, tracker.b_simple) == pytest.approx((1.0, 10.0, 10.0))
    tracker.update(4.0, 10.0, tokens=1000)
    # m = 0.25·1 + 0.5·4 = 2.25, corrected by 1 − 0.5² = 0.75: 3
    assert tracker.g2 == pytest.approx(3.0)
    assert tracker.trace == pytest.approx(10.0)
    assert tracker.b_simple == pytest.approx(10.0 / 3.0)


def test_smoothing_is_set_in_tokens_not_steps():
    half_life, total = 100_000, 400_000

    def signal(tokens: float) -> float:  # a drifting per-token quantity
        return 1.0 + 3.0 * tokens / total + 0.5 * math.sin(tokens / 30_000)

    trackers = {}
    for batch_tokens in (1_000, 8_000):
        tracker = GnsTracker(half_life_tokens=half_life)
        for k in range(total // batch_tokens):
            value = signal((k + 0.5) * batch_tokens)
            tracker.update(value, 2.0 * value, tokens=batch_tokens)
        trackers[batch_tokens] = tracker
    small, big = trackers[1_000], trackers[8_000]
    assert small.g2 == pytest.approx(big.g2, rel=1e-3)
    assert small.trace == pytest.approx(big.trace, rel=1e-3)
    assert small.b_simple == pytest.approx(2.0)  # the ratio of the averages
    assert small.g2 < 0.8 * signal(total)  # it smooths: lags the last value by much more than 1e-3


def test_eight_small_steps_equal_one_step_of_eight_times_the_tokens():
    a, b = GnsTracker(half_life_tokens=5_000), GnsTracker(half_life_tokens=5_000)
    a.update(2.0, 3.0, tokens=800)
    b.update(2.0, 3.0, tokens=800)
    for _ in range(8):
        a.update(7.0, 1.0, tokens=100)
    b.update(7.0, 1.0, tokens=800)
    assert (a.g2, a.trace) == pytest.approx((b.g2, b.trace), rel=1e-12)


def test_non_finite_estimates_are_skipped_and_counted():
    tracker = GnsTracker(half_life_tokens=1000)
    tracker.update(2.0, 6.0, tokens=500)
    for g2, trace in ((math.nan, 6.0), (2.0, math.inf), (-math.inf, math.nan)):
        tracker.update(g2, trace, tokens=500)
    assert tracker.skipped == 3 and tracker.steps == 1
    assert (tracker.g2, tracker.trace, tracker.b_simple) == pytest.approx((2.0, 6.0, 3.0))


def test_b_simple_is_nan_until_both_averages_are_positive():
    tracker = GnsTracker(half_life_tokens=1000)
    tracker.update(-1.0, 5.0, tokens=1000)  # a noisy negative |G|² estimate is kept, not dropped
    assert tracker.g2 == pytest.approx(-1.0)
    assert math.isnan(tracker.b_simple)
    tracker.update(5.0, 5.0, tokens=1000)  # (0.5·(−1)·0.5 + 0.5·5) / 0.75 = 3
    assert tracker.g2 == pytest.approx(3.0)
    assert tracker.b_simple == pytest.approx(5.0 / 3.0)


def test_state_dict_round_trip():
    tracker = GnsTracker(half_life_tokens=2048)
    for i in range(5):
        tracker.update(1.0 + i, 10.0 - i, tokens=512)
    tracker.update(math.nan, 1.0, tokens=512)
    state = tracker.state_dict()
    assert all(isinstance(v, (int, float)) for v in state.values())
    other = GnsTracker(half_life_tokens=2048)
    other.load_state_dict(state)
    assert other.state_dict() == state
    tracker.update(3.0, 4.0, tokens=512)
    other.update(3.0, 4.0, tokens=512)
    assert (other.g2, other.trace, other.skipped) == (tracker.g2, tracker.trace, 1)
    with pytest.raises(ValueError, match=r"half_life_tokens.*2048.*but got 4096"):
        GnsTracker(half_life_tokens=2048).load_state_dict(GnsTracker(half_life_tokens=4096).state_dict())


def test_tracker_refuses_bad_half_life_and_tokens():
    with pytest.raises(ValueError, match=r"half_life_tokens.*but got 0"):
        GnsTracker(half_life_tokens=0)
    with pytest.raises(ValueError, match=r"tokens.*but got -5"):
        GnsTracker(half_life_tokens=10).update(1.0, 1.0, tokens=-5)


# ---- torch helper ------------------------------------------------------------------------


def test_grad_sq_norm_sums_squares_over_parameters_in_fp32():
    a = nn.Parameter(torch.zeros(3))
    b = nn.Parameter(torch.zeros(2, 2, dtype=torch.bfloat16))
    c = nn.Parameter(torch.zeros(4))  # no gradient: left out
    a.grad = torch.tensor([1.0, 2.0, 2.0])
    b.grad = torch.full((2, 2), 0.5, dtype=torch.bfloat16)
    assert grad_sq_norm([a, b, c]) == pytest.approx(9.0 + 4 * 0.25)
    assert grad_sq_norm_tensor([a, b]).dtype == torch.float32
    assert grad_sq_norm([c]) == 0.0
    # 257 bf16 ones: 257 has no bf16 representation (a bf16 result would read 256)
    d = nn.Parameter(torch.zeros(257, dtype=torch.bfloat16))
    d.grad = torch.ones(257, dtype=torch.bfloat16)
    assert float(d.grad.square().sum()) == 256.0
    assert grad_sq_norm([d]) == pytest.approx(257.0, rel=1e-6)


# ---- forecasts ---------------------------------------------------------------------------


def test_forecast_b_noise_weights_by_share_of_ideal_steps():
    # w = 1/(1 + B/100): 0.5 for 100, 0.25 for 300; the rest is skipped
    b_hat = forecast_b_noise([100.0, math.nan, 300.0, -5.0, 0.0, math.inf], b_run=100)
    assert b_hat == pytest.approx((0.5 * 100 + 0.25 * 300) / 0.75)  # 166.67, not the plain mean 200
    assert forecast_b_noise([400.0] * 3, b_run=64) == pytest.approx(400.0)


def test_forecast_b_noise_refuses_empty_and_bad_b_run():
    with pytest.raises(ValueError, match="b_simple"):
        forecast_b_noise([math.nan, -1.0], b_run=100)
    with pytest.raises(ValueError, match="b_simple"):
        forecast_b_noise([], b_run=100)
    with pytest.raises(ValueError, match=r"b_run.*but got 0"):
        forecast_b_noise([100.0], b_run=0)


def test_forecast_cbs_is_the_closed_form():
    assert forecast_cbs(1000.0, b_ref=256) == pytest.approx(1.2 * 256 + 0.2 * 1000)  # 507.2
    assert forecast_cbs(0.0, b_ref=128, overhead=0.5) == pytest.approx(192.0)
    with pytest.raises(ValueError, match=r"b_hat.*but got -1"):
        forecast_cbs(-1.0, b_ref=256)
    with pytest.raises(ValueError, match=r"b_ref.*but got nan"):
        forecast_cbs(10.0, b_ref=math.nan)
    with pytest.raises(ValueError, match=r"overhead.*but got 0"):
        forecast_cbs(10.0, b_ref=256, overhead=0)
