"""The model-release message: body sha256, shapes, version, privacy fields; tampering refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.errors import IntegrityError
from shared.model_message import (
    ModelBody,
    ModelHeader,
    ModelMessage,
    model_body_sha256,
    verify_model,
)


def _message(estimator: str = "ols", privacy: str = "label", **body: Any) -> dict[str, Any]:
    body = body or {"coef": [1.0, -2.0, 3.0]}
    model_body = ModelBody(**body)
    header = ModelHeader(
        model_release_id="mrel_" + "a" * 24,
        dataset="ds",
        created=datetime(2026, 11, 23, tzinfo=UTC),
        estimator=estimator,  # type: ignore[arg-type]
        privacy=privacy,  # type: ignore[arg-type]
        epsilon="1",
        delta="0.001" if privacy == "eptr" else None,
        columns=["x1", "x2"],
        intercept=estimator == "ols",
        features_id="pf_" + "b" * 24,
        features_sha256="c" * 64,
        n=10,
        label_min=0.0,
        label_max=1.0,
        params={},
        noise="discrete_laplace" if privacy == "label" else "gaussian",
        noise_scale=0.5,
        sensitivity=0.5 if privacy == "label" else None,
        released=True,
        body_sha256=model_body_sha256(model_body),
    )
    return ModelMessage(header=header, body=model_body).model_dump(mode="json")


def test_round_trip_of_each_estimator() -> None:
    for message in (
        _message(),
        _message("nw", "label", queries=[[0.0, 0.0], [1.0, 1.0]], values=[0.5, 0.7]),
        _message("bayes", "eptr", priors=[0.4, 0.6], means=[[0.0, 1.0], [1.0, 0.0]]),
    ):
        assert verify_model(message).model_dump(mode="json") == message


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda m: m["body"]["coef"].__setitem__(0, 1.5), "sha256"),
        (lambda m: m["body"].__setitem__("coef", [1.0, 2.0]), "coef"),
        (lambda m: m["header"].__setitem__("format_version", 2), "format_version"),
        (lambda m: m["header"].__setitem__("delta", "0.01"), "delta"),
        (lambda m: m["header"].__setitem__("estimator", "bayes"), "eptr only|delta"),
        (lambda m: m["header"].__setitem__("gamma", 3.0), "gamma"),
        (lambda m: m["body"].__setitem__("coef", [1.0, float("nan"), 3.0]), "non-finite"),
    ],
)
def test_a_changed_message_is_refused(change: Any, match: str) -> None:
    message = _message()
    change(message)
    with pytest.raises(IntegrityError, match=match):
        verify_model(message)


def test_nw_grid_must_match_the_columns() -> None:
    message = _message("nw", "label", queries=[[0.0], [1.0]], values=[0.5, 0.7])
    with pytest.raises(IntegrityError, match="one value per column"):
        verify_model(message)
