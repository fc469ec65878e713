import pytest

from monitor.pricing import PriceMap, PricingError

HISTORY = """
[[price]]
model = "*"
effective_from = 2025-01-01
input = 3.0
output = 15.0
cached_input = 0.30

[[price]]
model = "gpt-x"
effective_from = 2025-01-01
input = 2.0
output = 8.0
cached_input = 0.5

[[price]]
model = "gpt-x"
effective_from = 2025-06-01
input = 1.0
output = 4.0
cached_input = 0.25
"""
JAN, JUL = 1_736_000_000.0, 1_752_000_000.0  # 2025-01-04, 2025-07-08


def test_default_map_prices_uncached_cached_and_output():
    prices = PriceMap.load()
    cost = prices.cost_usd("any", None, tokens_in=1_000_000, tokens_cached_in=400_000, tokens_out=100_000)
    assert cost == pytest.approx(0.6 * 3.0 + 0.4 * 0.30 + 0.1 * 15.0)


def test_entry_in_force_at_time_and_wildcard_fallback():
    prices = PriceMap.from_toml(HISTORY)
    assert prices.price_for("gpt-x", JAN).input_usd_per_mtok == 2.0
    assert prices.price_for("gpt-x", JUL).input_usd_per_mtok == 1.0
    assert prices.price_for("gpt-x", None).input_usd_per_mtok == 1.0
    assert prices.price_for("gpt-x", 0.0).input_usd_per_mtok == 2.0  # before history: first entry
    assert prices.price_for("other", JUL).input_usd_per_mtok == 3.0
    assert prices.cost_usd("gpt-x", JUL, 0, 0, 0, fees_usd=0.5) == 0.5


@pytest.mark.parametrize("text,needle", [
    ("[[price]]\nmodel='m'\neffective_from=2025-01-01\ninput=-1\noutput=1", "input must be a number >= 0"),
    ("[[price]]\nmodel='m'\ninput=1\noutput=1", "effective_from is required"),
    ("[[price]]\nmodel='m'\neffective_from=2025-01-01\ninput=1\noutput=1\ncolour=1", "unknown keys ['colour']"),
    ("x = 1", "needs at least one [[price]] entry"),
    ("[[price", "not valid TOML"),
])
def test_bad_price_maps_are_named(text, needle):
    with pytest.raises(PricingError) as info:
        PriceMap.from_toml(text, "p.toml")
    assert needle in str(info.value) and "p.toml" in str(info.value)


def test_model_without_price_and_no_wildcard():
    prices = PriceMap.from_toml("[[price]]\nmodel='m'\neffective_from=2025-01-01\ninput=1\noutput=1")
    with pytest.raises(PricingError, match="no price for model 'z'"):
        prices.price_for("z", None)
