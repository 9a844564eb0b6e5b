"""Exponential weight averaging: bias corrected, several τ at once, equal to a hand computation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cbscore.train.averaging import WeightAverage


def test_ewa_equals_hand_computed_bias_corrected_average():
    p = nn.Parameter(torch.tensor([0.0, 0.0]))
    avg = WeightAverage([p], taus=(0.5, 0.9))
    for value in ([2.0, 4.0], [4.0, 0.0], [8.0, 8.0]):
        with torch.no_grad():
            p.copy_(torch.tensor(value))
        avg.update()
    # τ = 0.5: ξ3 = 0.5³·0 + 0.25·θ1 ... ; ξ3 = 0.125·θ1 + 0.25·θ2 + 0.5·θ3, divided by 1 − 0.5³ = 0.875
    expected_05 = (0.125 * torch.tensor([2.0, 4.0]) + 0.25 * torch.tensor([4.0, 0.0]) + 0.5 * torch.tensor([8.0, 8.0])) / 0.875
    # τ = 0.9: weights 0.1·(0.81, 0.9, 1) over θ1..θ3, divided by 1 − 0.9³ = 0.271
    expected_09 = (0.081 * torch.tensor([2.0, 4.0]) + 0.09 * torch.tensor([4.0, 0.0]) + 0.1 * torch.tensor([8.0, 8.0])) / 0.271
    torch.testing.assert_close(avg.averaged(0)[0], expected_05)
    torch.testing.assert_close(avg.averaged(1)[0], expected_09)
    # by hand: (0.25 + 1 + 4) / 0.875 = 6 and (0.5 + 0 + 4) / 0.875 = 36/7
    assert avg.averaged(0)[0].tolist() == pytest.approx([6.0, 36 / 7])


def test_average_of_a_constant_is_the_constant_from_the_first_step():
    p = nn.Parameter(torch.full((3,), 7.0))
    avg = WeightAverage([p], taus=(0.9995,))
    avg.update()
    torch.testing.assert_close(avg.averaged(0)[0], torch.full((3,), 7.0))


def test_copy_to_loads_the_average_into_a_model_and_initial_weights_before_any_step():
    torch.manual_seed(0)
    model = nn.Linear(3, 2, bias=False)
    target = nn.Linear(3, 2, bias=False)
    avg = WeightAverage(list(model.parameters()), taus=(0.5,))
    avg.copy_to(target, 0)  # t = 0: the initial weights
    torch.testing.assert_close(target.weight, model.weight)
    first = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    avg.update()
    with torch.no_grad():
        model.weight.add_(1.0)
    avg.update()
    # θ1 = w0 + 1, θ2 = w0 + 2: (0.25·θ1 + 0.5·θ2) / 0.75 = w0 + 5/3
    avg.copy_to(target, 0)
    torch.testing.assert_close(target.weight, first + 5 / 3)


def test_state_dict_round_trip():
    p = nn.Parameter(torch.randn(4))
    avg = WeightAverage([p], taus=(0.9, 0.99))
    avg.update()
    avg.update()
    other = WeightAverage([p], taus=(0.9, 0.99))
    other.load_state_dict(avg.state_dict())
    assert other.count == 2
    torch.testing.assert_close(other.averaged(1)[0], avg.averaged(1)[0])


def test_bad_taus_are_rejected():
    with pytest.raises(ValueError, match=r"but got \(1\.0,\)"):
        WeightAverage([nn.Parameter(torch.zeros(1))], taus=(1.0,))


def test_every_tau_is_updated_in_one_fused_call():
    from torch.profiler import ProfilerActivity, profile

    params = [torch.full((3,), 2.0), torch.full((2, 2), 4.0)]
    average = WeightAverage(params, (0.5, 0.9, 0.99))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        average.update()
    assert {e.key: e.count for e in prof.key_averages()}.get("aten::_foreach_lerp_") == 1
    # the same numbers as a lerp per τ: after one step every bias-corrected average is θ itself
    for i in range(3):
        torch.testing.assert_close(average.averaged(i), params, rtol=0, atol=1e-6)
    assert [s[0][0].item() for s in average.shadows] == pytest.approx([1.0, 0.2, 0.02])


def test_a_step_factor_decays_per_token_and_the_correction_is_the_product_of_the_decays():
    # issue 39: a step of k·B0 decays by τ^k; the weights (1 − τ_i)·Π_{s>i} τ_s sum to 1 − Π_s τ_s
    p = nn.Parameter(torch.tensor([0.0]))
    avg = WeightAverage([p], taus=(0.5,))
    for factor, value in ((1.0, 2.0), (2.0, 4.0), (2.0, 8.0)):  # θ1 at τ = 0.5, θ2 and θ3 at τ² = 0.25
        avg.set_step_factor(factor)
        with torch.no_grad():
            p.fill_(value)
        avg.update()
    # by hand: weights (1 − 0.5)·0.25·0.25 = 0.03125, (1 − 0.25)·0.25 = 0.1875 and 0.75 on θ1..θ3, so
    # ξ3 = 0.03125·2 + 0.1875·4 + 0.75·8 = 6.8125, over 1 − 0.5·0.25·0.25 = 0.96875
    assert avg.decay == [0.03125] and avg.correction(0) == 0.96875
    assert avg.averaged(0)[0].item() == pytest.approx(6.8125 / 0.96875)
    # a state saved before the factor existed (no "decay") decayed by τ at each of its steps
    state = avg.state_dict()
    del state["decay"]
    earlier = WeightAverage([p], taus=(0.5,))
    earlier.load_state_dict(state)
    assert earlier.decay == [0.5 ** 3]
