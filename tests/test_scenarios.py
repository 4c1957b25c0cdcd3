"""Scenarios: empirical-Bayes shrinkage by hand, the CSV loaders, the registry and budget grids."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from msroute.datasets import CrowdData, build_instance, fit_beta_prior, fit_beta_strength
from msroute.errors import DataFormatError, InvalidValueError
from msroute.scenarios import (
    SCENARIOS,
    files_scenario,
    get_scenario,
    load_costs_csv,
    load_skills_csv,
    parse_budget,
)


# ---------------------------------------------------------------- empirical-Bayes shrinkage
def _kleinman_strength(cells: list[list[tuple[int, int]]]) -> Fraction:
    """Method-of-moments strength by hand, in exact fractions: ``cells[g]`` = (hits, trials)
    of the units of group g around the group's pooled rate."""
    num = Fraction(0)
    den = Fraction(0)
    for units in cells:
        units = [(h, n) for h, n in units if n > 0]
        n_tot = sum(n for _, n in units)
        p = Fraction(sum(h for h, _ in units), n_tot)
        s = sum(n * (Fraction(h, n) - p) ** 2 for h, n in units)
        j = len(units)
        num += s - p * (1 - p) * (j - 1)
        den += p * (1 - p) * (n_tot - Fraction(sum(n * n for _, n in units), n_tot) - (j - 1))
    rho = min(max(num / den, Fraction(1, 10**6)), Fraction(1))  # the documented clipping
    return 1 / rho - 1


def test_fit_beta_prior_matches_hand_computation() -> None:
    # p = 9/11; S = 2 (1/2 - 9/11)^2 + 4 (3/4 - 9/11)^2 + 5 (1 - 9/11)^2 = 17/44;
    # rho = (S / (p (1 - p)) - 2) / (11 - 45/11 - 2) = (187/72 - 2) / (54/11) = 473/3888
    a, b = fit_beta_prior([1, 3, 5], [2, 4, 5])
    rho = Fraction(473, 3888)
    assert a + b == pytest.approx(float(1 / rho - 1), rel=1e-12)
    assert a / (a + b) == pytest.approx(9 / 11, rel=1e-12)
    assert float(_kleinman_strength([[(1, 2), (3, 4), (5, 5)]])) == pytest.approx(a + b)


def test_fit_beta_strength_pools_groups_and_clips() -> None:
    cells = [[(1, 4), (4, 4), (2, 5)], [(5, 6), (1, 4)]]
    hits = [h for g in cells for h, _ in g]
    trials = [n for g in cells for _, n in g]
    groups = [0, 0, 0, 1, 1]
    got = fit_beta_strength(hits, trials, groups)
    assert got == pytest.approx(float(_kleinman_strength(cells)), rel=1e-12)
    assert 0 < got < 1e5  # an interior rho (0.53): no clipping involved
    # underdispersed -> the strongest prior; overdispersed beyond rho = 1 -> no prior
    assert fit_beta_strength([0, 3, 0], [3, 3, 3], [0, 0, 0]) == 0.0  # rho = 7/4
    # identical rates: no overdispersion, the strongest prior (rho clipped at 1e-6)
    assert fit_beta_strength([2, 2, 2], [4, 4, 4]) == pytest.approx(1e6 - 1)
    with pytest.raises(ValueError, match="cannot fit"):
        fit_beta_strength([1], [2])
    with pytest.raises(ValueError, match="hits must lie"):
        fit_beta_strength([3, 1], [2, 2])


def test_build_instance_eb_shrinkage_by_hand() -> None:
    # Workers 7, 8, 9; tasks 1..6, gold all 1; round-robin into N = 2 groups:
    # tasks 1, 3, 5 -> group 0; tasks 2, 4, 6 -> group 1.
    ann = [
        (1, 7, 1),
        (3, 7, 1),
        (5, 7, 1),
        (2, 7, 1),
        (4, 7, 0),
        (6, 7, 0),  # 3/3 and 1/3
        (1, 8, 1),
        (3, 8, 0),
        (5, 8, 0),
        (2, 8, 1),
        (4, 8, 0),
        (6, 8, 0),  # 1/3 and 1/3
        (1, 9, 1),
        (3, 9, 1),
        (2, 9, 1),
        (4, 9, 1),  # 2/2 and 2/2: "perfect"
    ]
    task, worker, resp = (list(x) for x in zip(*ann, strict=True))
    data = CrowdData(task, worker, resp, [1] * len(ann))
    inst = build_instance(data, [7, 8, 9], n_dims=2, n_flagged=1, shrinkage="eb")
    # level 1: workers (hits, answers) = (4, 6), (2, 6), (4, 4); rho = 0.308, unclipped
    strength = _kleinman_strength([[(4, 6), (2, 6), (4, 4)]])
    p = Fraction(10, 16)
    a, b = p * strength, (1 - p) * strength
    mu = [(h + a) / (n + a + b) for h, n in [(4, 6), (2, 6), (4, 4)]]
    # level 2: (group, worker) cells around each worker's own rate; rho = 0.25, unclipped
    cells = {7: [(3, 3), (1, 3)], 8: [(1, 3), (1, 3)], 9: [(2, 2), (2, 2)]}
    t = _kleinman_strength([cells[w] for w in (7, 8, 9)])
    expected = [
        [(cells[w][g][0] + t * mu[i]) / (cells[w][g][1] + t) for i, w in enumerate((7, 8, 9))]
        for g in range(2)
    ]
    assert inst.prior == pytest.approx((float(a), float(b), float(t)), rel=1e-12)
    np.testing.assert_allclose(inst.skills_base, np.array(expected, dtype=float), rtol=1e-12)
    np.testing.assert_allclose(inst.accuracy, [float(m) for m in mu], rtol=1e-12)
    assert float(t) == pytest.approx(3.0) and 0 < float(strength) < 1e5
    assert inst.costs[:, 1].tolist() == [0.0, 0.0, 1.0]  # the flag ranks the shrunk accuracy
    raw = build_instance(data, [7, 8, 9], n_dims=2, n_flagged=1)
    assert raw.prior is None and raw.skills_base[:, 2].tolist() == [1.0, 1.0]
    assert np.all(inst.skills_base[:, 2] < 1.0)  # 2 of 2 is no longer a perfect expert
    with pytest.raises(ValueError, match="shrinkage"):
        build_instance(data, [7, 8, 9], n_dims=2, n_flagged=1, shrinkage="ml")


# ---------------------------------------------------------------- CSV loaders
def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


SKILLS = "expert,code,math\nsmall,0.6,0.4\nlarge,0.9,0.85\n"
COSTS = "expert,usd,latency\nlarge,0.01,2.0\nsmall,0.0002,0.4\n"


def test_csv_loaders_read_and_align(tmp_path: Path) -> None:
    experts, dims, v = load_skills_csv(_write(tmp_path, "s.csv", SKILLS))
    assert experts == ("small", "large") and dims == ("code", "math")
    assert v.tolist() == [[0.6, 0.9], [0.4, 0.85]]  # (N, K)
    scen = files_scenario(str(tmp_path / "s.csv"), str(_write(tmp_path, "c.csv", COSTS)))
    inst = scen.instance(np.random.SeedSequence(0))
    assert inst.costs.tolist() == [[0.0002, 0.4], [0.01, 2.0]]  # reordered as the skills
    assert scen.budget_cost == "usd" and inst.cost_names == ("usd", "latency")


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("expert,code\nsmall,0.5,0.1\n", 2, "expected 2 comma-separated fields"),
        ("expert,code\nsmall,abc\n", 2, "code must be a number, got 'abc'"),
        ("expert,code\nsmall,\uff10.5\n", 2, "code must be a number, got '\uff10.5'"),  # fullwidth
        ("expert,code\nsmall,0.5\nlarge,1.5\n", 3, "must be in [0, 1]"),
        ("expert,code\nsmall,nan\n", 2, "must be in [0, 1]"),
        ("expert,code\nsmall,0.5\n\nsmall,0.7\n", 4, "listed again (first on line 2)"),
        ("expert,code,code\nsmall,0.5,0.5\n", 1, "appears twice"),
        ("expert\nsmall\n", 1, "at least one reward dimension column"),
        ("expert,code\n,0.5\n", 2, "expert name is empty"),
    ],
)
def test_skills_loader_rejects_malformed_files(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = _write(tmp_path, "bad.csv", text)
    with pytest.raises(DataFormatError) as err:
        load_skills_csv(path)
    assert f"{path}, line {line}: " in str(err.value)
    assert fragment in str(err.value)


def test_csv_loaders_reject_files_without_rows(tmp_path: Path) -> None:
    for text, fragment in (("", "is empty"), ("\n\n", "is empty"), ("expert,a\n", "no expert")):
        path = _write(tmp_path, "x.csv", text)
        with pytest.raises(DataFormatError, match=fragment) as err:
            load_costs_csv(path)
        assert str(path) in str(err.value)
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"\xff\xfe\x00x")
    with pytest.raises(DataFormatError, match="not a text file"):
        load_costs_csv(binary)


def test_costs_loader_rejects_costs_outside_the_range_of_costs(tmp_path: Path) -> None:
    for value in ("-0.1", "inf", "nan", "1.000001e12", "1e308"):
        path = _write(tmp_path, "c.csv", f"expert,usd\nsmall,{value}\n")
        with pytest.raises(DataFormatError, match=r"line 2: usd == .* must be in \[0, 1e\+12\]"):
            load_costs_csv(path)
    path = _write(tmp_path, "c.csv", "expert,usd\nsmall,1e12\n")  # the range's end is in it
    assert load_costs_csv(path)[2].tolist() == [[1e12]]


def test_files_scenario_checks_the_pair(tmp_path: Path) -> None:
    skills = _write(tmp_path, "s.csv", SKILLS)
    other = _write(tmp_path, "c.csv", "expert,usd\nsmall,0.1\nhuge,0.2\n")
    with pytest.raises(DataFormatError, match=r"same experts.*no row for \['large'\]"):
        files_scenario(str(skills), str(other))
    costs = _write(tmp_path, "c2.csv", COSTS)
    with pytest.raises(DataFormatError, match="budget cost 'tokens' is not a column"):
        files_scenario(str(skills), str(costs), budget_cost="tokens")
    scen = files_scenario(str(skills), str(costs), budget_cost="latency")
    params = dict(scen.params)
    assert get_scenario("files", scen.params).budget_cost == "latency"
    costs.write_text(COSTS.replace("0.01", "0.02"))
    with pytest.raises(DataFormatError, match="changed since"):
        files_scenario(str(skills), str(costs), sha256=params["sha256"])


# ---------------------------------------------------------------- registry, budgets
def test_registry_instances_are_reproducible_and_documented() -> None:
    for name in SCENARIOS:
        scen = get_scenario(name)
        assert scen.notes.strip(), name
        one = scen.instance(np.random.SeedSequence(3))
        two = scen.instance(np.random.SeedSequence(3))
        assert np.array_equal(one.skills_base, two.skills_base)
        assert np.array_equal(one.costs, two.costs)
        assert scen.budget_cost in one.cost_names
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        get_scenario("nope")


def test_llm_sim_prices_span_two_orders_of_magnitude() -> None:
    scen = get_scenario("llm-sim")
    inst = scen.instance(np.random.SeedSequence(0))
    price = inst.costs[:, inst.cost_names.index("usd")]
    assert inst.n_experts == 12 and scen.budget_unit == "$ per query"
    assert price.max() / price.min() == pytest.approx(100.0)
    assert np.all((inst.skills_base > 0) & (inst.skills_base < 1))


def test_trec_sharp_is_shrunk_and_paper_is_not() -> None:
    sharp = get_scenario("trec-sharp").instance(np.random.SeedSequence(0))
    paper = get_scenario("trec-paper").instance(np.random.SeedSequence(0))
    assert sharp.skills_base.shape == (10, 50) and paper.skills_base.shape == (3, 50)
    assert sharp.skills_base.max() < 1.0  # no perfect expert by luck
    assert paper.skills_base.max() == 1.0


def test_budget_grid_spans_cheapest_feasible_to_none() -> None:
    scen = get_scenario("llm-sim")
    insts = [scen.instance(np.random.SeedSequence(s)) for s in range(2)]
    grid = scen.budget_grid(insts, 4)
    assert grid[-1] == "none" and len(grid) == 5
    values = [parse_budget(g) for g in grid[:-1]]
    assert values == sorted(values)
    m = scen.m_draws
    for inst in insts:  # the lowest level admits a floored policy (Assumption 1)
        k = inst.n_experts
        c = inst.costs[:, 0]
        gamma = 1 / (10 * k)
        assert values[0] >= m * ((1 - k * gamma) * c.min() + gamma * c.sum()) - 1e-15
    # the top level reaches uniform routing's expected realized cost
    top = max(float(np.sum(i.costs[:, 0] * (1 - (1 - 1 / i.n_experts) ** m))) for i in insts)
    assert values[-1] >= top


def test_parse_budget() -> None:
    assert parse_budget("none") is None and parse_budget("0.5") == 0.5
    assert parse_budget("1e12") == 1e12  # the end of the range of costs and bounds
    for bad in ("-1", "inf", "nan", "cheap"):
        with pytest.raises(ValueError, match="budget level"):
            parse_budget(bad)
    # float() reads these as 3, 10 and 1e308: not what a budget level means
    for bad, named in (
        ("\uff13", "neither a number"),
        ("1_0", "neither a number"),
        ("1e308", r"outside the range of costs and bounds, \[-1e\+12, 1e\+12\]"),
    ):
        with pytest.raises(InvalidValueError, match=f"budget level '{bad}'.*{named}"):
            parse_budget(bad)
