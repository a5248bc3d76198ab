"""SYNTHETIC ad-conversion data (generated here; not real data): features and conversion values.

A stand-in for the Criteo Sponsored Search Conversion Log, which is not redistributable. Each
row is one click: categorical features (campaign, device, country, site category, ad position)
and numeric ones (product price, hour, days since the last visit, past purchases). The label is
the conversion value: 0 when the click did not convert (most clicks), otherwise a heavy-tailed
(log-normal) amount driven by the price and the campaign, clipped to the public bounds [0, 400].
The label really depends on the features (a model beats the mean by a wide margin), but with a
lot of irreducible noise, as conversion data has.

Vectorised numpy only: 10^6 rows take well under a second.
"""

from __future__ import annotations

import numpy as np

from shared.errors import InvalidParameterError

LABEL_MIN = 0.0
LABEL_MAX = 400.0
N_CAMPAIGNS = 60
DEVICES = np.array(["mobile", "desktop", "tablet"])
COUNTRIES = np.array(["US", "DE", "FR", "GB", "JP", "BR", "IN", "CA", "ES", "IT", "NL", "SE"])
SITE_CATEGORIES = np.array(
    ["news", "sports", "shopping", "travel", "tech", "games", "food", "finance", "auto", "home"]
)
CATEGORICAL = ("campaign", "device", "country", "site_category", "ad_position")
NUMERIC = ("price", "hour", "days_since_visit", "past_purchases")


def _world(seed: int = 7) -> dict[str, np.ndarray]:
    """Fixed effects of the synthetic world (independent of the sample's seed)."""
    rng = np.random.default_rng(seed)
    return {
        "campaign_conv": rng.normal(0.0, 1.4, N_CAMPAIGNS),
        "campaign_value": rng.normal(0.0, 0.6, N_CAMPAIGNS),
        "campaign_price": rng.normal(3.2, 0.6, N_CAMPAIGNS),
        "campaign_weight": 1.0 / np.arange(1, N_CAMPAIGNS + 1) ** 0.8,
        "device_conv": np.array([-0.3, 0.35, 0.0]),
        "device_weight": np.array([0.62, 0.3, 0.08]),
        "country_conv": rng.normal(0.0, 0.35, COUNTRIES.size),
        "country_value": rng.normal(0.0, 0.25, COUNTRIES.size),
        "country_weight": rng.dirichlet(np.full(COUNTRIES.size, 2.0)),
        "site_conv": rng.normal(0.0, 0.5, SITE_CATEGORIES.size),
    }


def make_ads(n: int, *, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``n`` SYNTHETIC clicks: (feature columns, conversion values in [0, 400]).

    Columns: categorical ``campaign`` (e.g. "c07"), ``device``, ``country``, ``site_category``,
    ``ad_position`` (string "1".."8"); numeric ``price``, ``hour``, ``days_since_visit``,
    ``past_purchases``. About 18% of clicks convert; converted values are log-normal around a
    feature-dependent median (roughly 10 to 100), clipped to 400.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError(f"n ({n!r}) must be an integer >= 1")
    world = _world()
    rng = np.random.default_rng(seed)
    campaign = rng.choice(
        N_CAMPAIGNS, size=n, p=world["campaign_weight"] / world["campaign_weight"].sum()
    )
    device = rng.choice(DEVICES.size, size=n, p=world["device_weight"])
    country = rng.choice(COUNTRIES.size, size=n, p=world["country_weight"])
    site = rng.integers(0, SITE_CATEGORIES.size, size=n)
    position = rng.integers(1, 9, size=n)
    hour = rng.integers(0, 24, size=n).astype(np.float64)
    days = np.round(rng.exponential(12.0, size=n), 1)
    past = rng.poisson(0.8, size=n).astype(np.float64)
    price = np.round(np.exp(world["campaign_price"][campaign] + rng.normal(0.0, 0.5, size=n)), 2)

    logit = (
        -1.2
        + world["campaign_conv"][campaign]
        + world["device_conv"][device]
        + world["country_conv"][country]
        + world["site_conv"][site]
        - 0.18 * (position - 1)
        + 0.5 * np.cos(2 * np.pi * (hour - 20.0) / 24.0)
        - 1.2 * np.log1p(days / 10.0)
        + 0.9 * np.minimum(past, 4.0)
    )
    converted = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    log_value = (
        np.log(price)
        + 0.15
        + world["campaign_value"][campaign]
        + world["country_value"][country]
        + 0.25 * np.minimum(past, 4.0)
        + rng.normal(0.0, 0.45, size=n)
    )
    labels = np.where(converted, np.clip(np.exp(log_value), LABEL_MIN, LABEL_MAX), 0.0)

    features = {
        "campaign": np.char.add("c", np.char.zfill(campaign.astype(str), 2)),
        "device": DEVICES[device],
        "country": COUNTRIES[country],
        "site_category": SITE_CATEGORIES[site],
        "ad_position": position.astype(str),
        "price": price,
        "hour": hour,
        "days_since_visit": days,
        "past_purchases": past,
    }
    return features, labels.astype(np.float64)


def example_ids(n: int, *, prefix: str = "click") -> list[str]:
    """Stable example ids ``click-0000000`` ... for ``n`` rows."""
    width = max(7, len(str(n)))
    return [f"{prefix}-{i:0{width}d}" for i in range(n)]
