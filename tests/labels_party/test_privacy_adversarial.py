"""Adversarial accounting and disclosure checks of the labels party (exact arithmetic)."""

from __future__ import annotations

import logging
import re
from decimal import Decimal

import numpy as np

from tests.labels_party.conftest import (
    OPS,
    create_dataset,
    ledger_rows,
    put_labels,
    register,
    release,
)


def _exact_ledger_total(db_path, dataset: str) -> Decimal:
    rows = [r for r in ledger_rows(db_path) if r["dataset"] == dataset]
    return sum((Decimal(r["epsilon_exact"]) for r in rows), Decimal(0))


def _verify_totals(db_path) -> dict[str, Decimal]:
    from labels_party.budget.ledger import verify
    from labels_party.db.engine import Database, make_engine

    db = Database(make_engine(f"sqlite:///{db_path}"))
    with db.read() as conn:
        report = verify(conn)
    db.engine.dispose()
    assert report.ok, report.problems
    return report.spent


def _small_dataset(client, name: str, budget: object) -> None:
    create_dataset(client, name, epsilon_budget=budget)
    register(client, name, [f"e{i}" for i in range(20)])


def test_ten_releases_of_a_tenth_fill_a_budget_of_one_exactly(client, db_path):
    """0.1 is the decimal 0.1: ten fit a budget of 1, and then nothing more, however small."""
    _small_dataset(client, "tenths", 1)
    for _ in range(10):
        response = release(client, "tenths", epsilon=0.1)
        assert response.status_code == 201, response.text
    view = client.get("/v1/datasets/tenths", headers=OPS).json()
    assert (view["epsilon_spent"], view["epsilon_left"]) == ("1", "0")
    refused = release(client, "tenths", epsilon=1e-12)
    assert refused.status_code == 409
    body = refused.json()
    assert (body["spent"], body["requested"], body["left"]) == ("1", "0.000000000001", "0")
    assert "spent 1, requested 0.000000000001, left 0 of 1" in body["detail"]
    assert body["errors"][0]["field"] == "epsilon"
    # What the database stores and what verify recomputes agree exactly.
    assert _exact_ledger_total(db_path, "tenths") == Decimal(1)
    assert _verify_totals(db_path)["tenths"] == Decimal(1)


def test_a_budget_spent_in_one_release_refuses_anything_more(client):
    _small_dataset(client, "four", 4)
    assert release(client, "four", epsilon=4).status_code == 201
    for tiny in (1e-9, 1e-12, "0.000000000000000000000000001"):
        refused = release(client, "four", epsilon=tiny)
        assert refused.status_code == 409, refused.text
        assert refused.json()["left"] == "0"


def test_a_huge_budget_is_exact_too(client, db_path):
    """1e300 spent in one release leaves exactly 0: no relative slack lets 1e6 through."""
    _small_dataset(client, "huge", 1e300)
    assert release(client, "huge", epsilon=1e300).status_code == 201, "the whole budget fits"
    assert client.get("/v1/datasets/huge", headers=OPS).json()["epsilon_left"] == "0"
    for more in (1e6, 1000, 50):
        assert release(client, "huge", epsilon=more).status_code == 409
    assert _verify_totals(db_path)["huge"] == Decimal("1e300")


def test_spends_below_half_an_ulp_are_recorded_exactly(client, db_path):
    """Spends a float total would round away are kept: the recorded total is the exact sum."""
    _small_dataset(client, "tiny", 2)
    body = {"mechanism": "rr_on_bins", "epsilon": 1.0, "epsilon_histogram": 0.5}
    assert release(client, "tiny", **body).status_code == 201
    for _ in range(12):
        response = release(client, "tiny", mechanism="rr_on_bins", epsilon=1e-17,
                           epsilon_histogram=5e-18)  # fmt: skip
        assert response.status_code == 201, response.text
    spent = client.get("/v1/datasets/tiny", headers=OPS).json()["epsilon_spent"]
    assert Decimal(spent) == _exact_ledger_total(db_path, "tiny") == Decimal("1.00000000000000012")


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

    from shared import rng as rng_module

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
    drawn = {"urandom": 0, "randbelow": 0, "below": 0}
    real_urandom, real_randbelow = os.urandom, secrets.randbelow
    real_below = rng_module.BufferedBelow.__call__

    def urandom(n: int) -> bytes:
        drawn["urandom"] += n
        return real_urandom(n)

    def randbelow(n: int) -> int:
        drawn["randbelow"] += 1
        return real_randbelow(n)

    def below(self: rng_module.BufferedBelow, n: int) -> int:
        drawn["below"] += 1
        return real_below(self, n)

    monkeypatch.setattr(os, "urandom", urandom)
    monkeypatch.setattr(secrets, "randbelow", randbelow)
    monkeypatch.setattr(rng_module.BufferedBelow, "__call__", below)
    for mechanism in ("rr_on_bins", "rpwithprior"):
        drawn.update(urandom=0, randbelow=0, below=0)
        response = release(client, "csprng", mechanism=mechanism, epsilon=1.0)
        assert response.status_code == 201, response.text
        assert drawn["urandom"] >= 4 * len(ids)  # at least one 32-bit word per label
        # The histogram's exact discrete Laplace noise: each cell's draw takes at least two
        # uniform integers (its uniform part and its sign; CKS 2020 Algorithm 2), from
        # shared.rng.BufferedBelow, whose bytes are os.urandom's (counted above), or
        # secrets.randbelow. The plan picks the number of cells (16 and 8 here), so the bound
        # comes from the release itself.
        assert drawn["below"] + drawn["randbelow"] >= 2 * response.json()["bins"]
