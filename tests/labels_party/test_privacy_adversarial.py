"""Adversarial accounting and disclosure checks of the labels party (exact arithmetic)."""

from __future__ import annotations

import logging
import math
import re
from fractions import Fraction

import numpy as np

from labels_party import datasets as ds
from tests.labels_party.conftest import (
    OPS,
    create_dataset,
    ledger_rows,
    put_labels,
    register,
    release,
)


def _exact_ledger_total(db_path, dataset: str) -> Fraction:
    spends = [r["epsilon"] for r in ledger_rows(db_path) if r["dataset"] == dataset]
    return sum((Fraction(e) for e in spends), Fraction(0))


def test_recorded_spend_never_rounds_below_the_ledger(client, db_path):
    """Spends below half an ulp of the running total must still move the recorded total."""
    create_dataset(client, "tiny", epsilon_budget=1.0)
    register(client, "tiny", [f"e{i}" for i in range(20)])
    body = {"mechanism": "rr_on_bins", "epsilon": 1.0, "epsilon_histogram": 0.5}
    assert release(client, "tiny", **body).status_code == 201
    for _ in range(12):
        response = release(client, "tiny", mechanism="rr_on_bins", epsilon=1e-17,
                           epsilon_histogram=5e-18)  # fmt: skip
        assert response.status_code == 201, response.text
    spent = client.get("/v1/datasets/tiny", headers=OPS).json()["epsilon_spent"]
    assert Fraction(spent) >= _exact_ledger_total(db_path, "tiny") > 1


def test_budget_check_is_exact_at_the_limit():
    """A spend the float sum would absorb must not slip past a budget that is full."""
    for budget in np.linspace(1.0, 1.9, 2001):
        limit = Fraction(float(budget)) * (1 + Fraction(ds.BUDGET_RTOL))
        spent = float(limit)
        if Fraction(spent) > limit:
            spent = math.nextafter(spent, 0.0)
        gap = limit - Fraction(spent)
        half_ulp = Fraction(math.ulp(spent)) / 2
        if gap < half_ulp / 2:  # a spend in (gap, half an ulp) overshoots yet rounds away
            requested = float((gap + half_ulp) / 2)
            break
    assert spent + requested == spent  # the float sum absorbs it ...
    assert not ds.fits_budget(budget=float(budget), spent=spent, requested=requested)
    assert ds.fits_budget(budget=float(budget), spent=spent, requested=float(gap) / 2)


def test_budget_check_does_not_overflow_near_the_float_maximum():
    huge = 1.7e308
    assert not ds.fits_budget(budget=huge, spent=1e308, requested=1e308)
    assert ds.add_spend(1e308, 1e307) >= 1.1e308


def test_label_ingest_logs_no_label_count(client, caplog):
    """How many labels a batch carried is label information (conversions): not logged."""
    caplog.set_level(logging.DEBUG)
    create_dataset(client, "logs")
    pairs = [(f"x{i}", 1.0) for i in range(37)]
    assert put_labels(client, "logs", pairs).status_code == 200
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("labels_party")]
    assert any("labels batch stored" in m for m in messages)
    assert not any(re.search(r"\b37\b", m) for m in messages)


def test_label_bounds_whose_width_overflows_are_refused_at_creation(client):
    body = {"name": "wide", "label_min": -1e308, "label_max": 1e308, "default_label": 0.0,
            "epsilon_budget": 1.0}  # fmt: skip
    response = client.post("/v1/datasets", json=body, headers=OPS)
    assert response.status_code == 422
    assert "label_max" in {e["field"] for e in response.json()["errors"]}


def test_a_production_release_draws_only_from_the_os_csprng(make_client, monkeypatch):
    """With every numpy PRNG entry point booby-trapped, a release still works (and reads
    os.urandom / secrets): no code path silently falls back to a seeded or default Generator."""
    import os
    import secrets

    client = make_client(seed=None, warmup=False)  # what `labeldp serve labels` builds
    create_dataset(client, "csprng")
    ids = [f"c{i}" for i in range(500)]
    register(client, "csprng", ids)
    assert put_labels(client, "csprng", [(i, 7.0) for i in ids[:200]]).status_code == 200

    def trap(*_args, **_kwargs):
        raise AssertionError("a numpy PRNG was used in production")

    class Trap:  # a class (isinstance checks keep working) that cannot be instantiated
        __new__ = trap

    for name in ("Generator", "RandomState", "PCG64", "MT19937", "Philox", "SFC64"):
        monkeypatch.setattr(np.random, name, Trap)
    for name in ("default_rng", "SeedSequence", "random", "rand", "randint", "uniform", "seed"):
        monkeypatch.setattr(np.random, name, trap)
    drawn = {"urandom": 0, "randbelow": 0}
    real_urandom, real_randbelow = os.urandom, secrets.randbelow

    def urandom(n: int) -> bytes:
        drawn["urandom"] += n
        return real_urandom(n)

    def randbelow(n: int) -> int:
        drawn["randbelow"] += 1
        return real_randbelow(n)

    monkeypatch.setattr(os, "urandom", urandom)
    monkeypatch.setattr(secrets, "randbelow", randbelow)
    for mechanism in ("rr_on_bins", "rpwithprior"):
        drawn.update(urandom=0, randbelow=0)
        response = release(client, "csprng", mechanism=mechanism, epsilon=1.0)
        assert response.status_code == 201, response.text
        assert drawn["urandom"] >= 4 * len(ids)  # at least one 32-bit word per label
        assert drawn["randbelow"] >= 64  # the discrete Laplace noise of the 64 cells
