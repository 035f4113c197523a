"""What an answer cost: the host's reported usage when it gives one, else an estimate from the
text's length, priced with the configured models."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core.process_cache import ProcessCache
from workflows.models import ConfiguredModel

CHARS_PER_TOKEN = 4
MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class Charge:
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    estimated: bool


# The configured models (a curated list of dozens), read once a second at most by each process:
# every answer of a run asks for the default model and a price. A change made in this process is
# seen at once (models_forget, connected in runs.apps), one made elsewhere within the second.
_catalogue = ProcessCache(1.0, maxsize=1)


def _models() -> tuple[str | None, dict[str, tuple[Decimal, Decimal]]]:
    """(the active default model, or None; each model's input and output price per million tokens)."""
    known = _catalogue.get("models")
    if known is None:
        rows = list(ConfiguredModel.objects.order_by("model_id").values_list(
            "model_id", "is_default", "active", "input_usd_per_mtok", "output_usd_per_mtok"))
        default = next((model for model, is_default, active, _, _ in rows if is_default and active), None)
        known = (default, {model: (prices_in, prices_out) for model, _, _, prices_in, prices_out in rows})
        _catalogue.set("models", known)
    return known


def models_forget(**_: Any) -> None:
    _catalogue.forget()


def default_model() -> str | None:
    return _models()[0]


def _price_row(model: str | None) -> tuple[Decimal, Decimal] | None:
    if not model:
        return None
    return _models()[1].get(model)


def _prices(model: str) -> tuple[Decimal, Decimal]:
    """The model's prices; an unknown model is priced as the default one."""
    row = _price_row(model) or _price_row(default_model())
    return (Decimal(row[0]), Decimal(row[1])) if row else (Decimal(0), Decimal(0))


def _count(value: Any) -> int:
    return max(int(value), 0) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def turn_charge(*, model: str, usage: dict[str, Any] | None, prompt: str, response: str, free: bool = False) -> Charge:
    if free:
        return Charge(0, 0, Decimal(0), estimated=False)
    usage = usage or {}
    reported = any(k in usage for k in ("inputTokens", "outputTokens", "costUsd"))
    if reported:
        input_tokens = sum(_count(usage.get(k)) for k in ("inputTokens", "cacheCreationTokens", "cacheReadTokens"))
        output_tokens = _count(usage.get("outputTokens"))
    else:
        input_tokens = len(prompt) // CHARS_PER_TOKEN
        output_tokens = len(response) // CHARS_PER_TOKEN
    if isinstance(usage.get("costUsd"), int | float) and not isinstance(usage.get("costUsd"), bool):
        cost = Decimal(str(usage["costUsd"]))
    else:
        price_in, price_out = _prices(model)
        cost = (price_in * input_tokens + price_out * output_tokens) / MILLION
    return Charge(input_tokens, output_tokens, cost.quantize(Decimal("0.000001")), estimated=not reported)
