"""What an LLM call costs: its ``usage`` times the model's prices per million tokens.

Prices come from the gateway config (``input_usd_per_mtok``, ``output_usd_per_mtok``,
``cached_input_usd_per_mtok``) or, with ``prices = "litellm"``, from the price map that
LiteLLM ships inside its wheel (``model_prices_and_context_window_backup.json``). That file is
read directly, without importing LiteLLM (whose import fetches a fresh copy over the network):
nothing is downloaded, and the prices are those of the installed LiteLLM version. Prices given
in the config override the map's, key by key.

The usage is the OpenAI format's: ``prompt_tokens`` (of which
``prompt_tokens_details.cached_tokens`` were read from the provider's prompt cache, billed at
the cached price where the model has one) and ``completion_tokens`` (reasoning tokens included,
as OpenAI counts them).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from msroute._validation import COST_MAX
from msroute.errors import ConfigError

__all__ = ["LITELLM_PRICES", "Prices", "Usage", "litellm_prices", "usage_of"]

#: The price map's file name inside the installed ``litellm`` package.
LITELLM_PRICES = "model_prices_and_context_window_backup.json"
#: Tokens in a priced unit (prices are per million tokens).
MTOK = 1e6


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens one call billed (OpenAI's ``usage``)."""

    prompt: int
    completion: int
    cached: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt + other.prompt,
            self.completion + other.completion,
            self.cached + other.cached,
        )

    def to_openai(self) -> dict[str, Any]:
        """The usage object of an OpenAI answer."""
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
            "prompt_tokens_details": {"cached_tokens": self.cached},
        }


@dataclass(frozen=True, slots=True)
class Prices:
    """Dollars per million tokens: prompt, completion, and prompt tokens read from the cache
    (None: billed as other prompt tokens)."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float
    cached_input_usd_per_mtok: float | None = None

    def usd(self, usage: Usage) -> float:
        """The dollars ``usage`` costs at these prices."""
        cached = min(usage.cached, usage.prompt)
        cached_price = self.cached_input_usd_per_mtok
        if cached_price is None:
            cached_price = self.input_usd_per_mtok
        total = (
            (usage.prompt - cached) * self.input_usd_per_mtok
            + cached * cached_price
            + usage.completion * self.output_usd_per_mtok
        )
        return total / MTOK


def _count(value: object) -> int | None:
    """A token count as an int, or None if it is not one (a usage we cannot read)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53:
        return None
    return value


def usage_of(body: object) -> Usage | None:
    """The usage of an OpenAI answer (or of a stream's usage chunk), None when it has none or
    one that is not a usage (a count that is not a non-negative integer)."""
    if not isinstance(body, Mapping):
        return None
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens", 0))
    if prompt is None or completion is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens", 0)) if isinstance(details, Mapping) else 0
    return Usage(prompt, completion, cached or 0)


def price(value: object, key: str) -> float:
    """A price from a config: a finite number of dollars per million tokens, ``>= 0``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{key}: must be a number of dollars per million tokens, got {value!r:.80}"
        )
    v = float(value)
    if not (math.isfinite(v) and 0.0 <= v <= COST_MAX):
        raise ConfigError(f"{key}: must be a finite price in [0, {COST_MAX:g}], got {value!r:.80}")
    return v


@lru_cache(maxsize=1)
def _litellm_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            'prices = "litellm" needs LiteLLM installed for its price map: '
            "pip install 'msroute[litellm]' (or give input_usd_per_mtok and "
            "output_usd_per_mtok)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / LITELLM_PRICES
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read LiteLLM's price map {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"LiteLLM's price map {path} is not a JSON object")
    return data


def _per_mtok(per_token: object) -> object:
    """A price per token as one per million tokens, to 12 significant digits (1.5e-07 per
    token is 0.15, not 0.15000000000000002); what is not a number is returned as it is."""
    if isinstance(per_token, bool) or not isinstance(per_token, int | float):
        return per_token
    return float(f"{per_token * MTOK:.12g}")


def litellm_prices(model: str, where: str) -> Prices:
    """The prices LiteLLM's shipped price map gives ``model`` (``where``: the config key, for
    messages).

    Raises
    ------
    ConfigError
        LiteLLM is not installed, or its map has no per-token prices for ``model``.
    """
    entry = _litellm_map().get(model)
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"{where}: LiteLLM's price map has no model {model!r}; set price_model to its name "
            "there, or give input_usd_per_mtok and output_usd_per_mtok"
        )
    try:
        per_token = [entry.get(k) for k in ("input_cost_per_token", "output_cost_per_token")]
        inp, out = (price(_per_mtok(v), where) for v in per_token)
        cached = entry.get("cache_read_input_token_cost")
        cached_price = None if cached is None else price(_per_mtok(cached), where)
    except (ConfigError, TypeError) as exc:
        raise ConfigError(
            f"{where}: LiteLLM's price map has no per-token prices for {model!r} ({exc})"
        ) from exc
    return Prices(inp, out, cached_price)
