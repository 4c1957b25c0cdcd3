"""``llm-sim``: a SIMULATED LLM-routing family (synthetic numbers, no real model measured)."""

from __future__ import annotations

import numpy as np

from msroute.scenarios.base import Scenario, ScenarioInstance

__all__ = ["LLM_CATEGORIES", "llm_sim", "llm_sim_instance"]

#: Query categories of the simulation (reward dimensions).
LLM_CATEGORIES: tuple[str, ...] = ("code", "math", "reasoning", "extraction", "writing", "chat")

_N_MODELS = 12
_PRICE_RANGE = (1e-4, 1e-2)  # dollars per call: two orders of magnitude
_ABILITY_SLOPE = 0.8  # logit ability per decade of price
_ABILITY_NOISE = 0.5
_DIFFICULTY_SD = 1.0
_SPECIALTY = (0.5, 2.0)  # logit bonus on the model's specialty category
_LATENCY_BASE = 0.4  # seconds per call of the cheapest model
_LATENCY_EXPONENT = 0.35
_LATENCY_NOISE = 0.2


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=np.float64)


def llm_sim_instance(seed: np.random.SeedSequence) -> ScenarioInstance:
    """One draw of the generative model documented in ``llm_sim``."""
    rng = np.random.default_rng(seed)
    k, n = _N_MODELS, len(LLM_CATEGORIES)
    price = np.geomspace(*_PRICE_RANGE, k)
    decades = np.log10(price / _PRICE_RANGE[0])
    ability = _ABILITY_SLOPE * decades + rng.normal(0.0, _ABILITY_NOISE, k)
    difficulty = rng.normal(0.0, _DIFFICULTY_SD, n)
    specialty = rng.integers(0, n, k)
    bonus = rng.uniform(*_SPECIALTY, k)
    logit = ability[None, :] - difficulty[:, None]
    logit[specialty, np.arange(k)] += bonus
    latency = (
        _LATENCY_BASE
        * (price / _PRICE_RANGE[0]) ** _LATENCY_EXPONENT
        * np.exp(rng.normal(0.0, _LATENCY_NOISE, k))
    )
    return ScenarioInstance(
        skills_base=_sigmoid(logit),
        costs=np.column_stack([price, latency]),
        cost_names=("usd", "latency_s"),
        expert_names=tuple(f"model-{i:02d}" for i in range(k)),
    )


def llm_sim() -> Scenario:
    """SIMULATED LLM routing: 12 models, 6 query categories, M = 2, budgets in $ per query.

    Synthetic: no model was measured; the family only has the structure of LLM routing. Per
    seed (instance stream), on the logit scale:

    * price of model i: log-spaced from $0.0001 to $0.01 per call (two orders of magnitude);
    * ability ``a_i = 0.8 * log10(price_i / $0.0001) + N(0, 0.5^2)``: dearer models are better
      on average, not always;
    * difficulty ``d_n ~ N(0, 1)`` of category n, shared by all models;
    * specialty: each model has one category ``s_i`` (uniform) with a bonus
      ``b_i ~ U(0.5, 2.0)``;
    * accuracy ``V_base[n, i] = sigmoid(a_i - d_n + b_i [n = s_i])``;
    * latency ``0.4 s * (price_i / $0.0001)^0.35 * exp(N(0, 0.2^2))`` (0.4 s to about 2 s),
      a second cost coordinate, recorded and not bounded.

    Each round is a query with one item per category (reward = the sum over categories of the
    best routed model's quality, up to 6), M = 2 models are called and the costs of the distinct
    models called are paid; quality scores are Beta around the accuracy (kappa = 20). The
    budget bounds the time-averaged dollars per query.
    """
    return Scenario(
        name="llm-sim",
        title="simulated LLM routing (12 models, 6 categories, M=2)",
        make_instance=llm_sim_instance,
        m_draws=2,
        budget_cost="usd",
        budget_unit="$ per query",
        kappa=20.0,
        notes=llm_sim.__doc__ or "",
    )
