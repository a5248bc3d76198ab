"""shared.service.http: the kit's pieces alone, then both real apps answering through it the same
way."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Query, Request
from hypothesis import given
from hypothesis import strategies as st
from starlette.exceptions import StarletteDeprecationWarning

from shared.service.http import errors as http_errors
from shared.service.http import openapi
from shared.service.http.auth import MISSING_OR_INVALID, match_token, presented_token, unauthorized
from shared.service.http.errors import HTTPProblem
from shared.service.http.requests import (
    JSON_MEDIA,
    check_query,
    media_type,
    require_json,
    require_media,
)
from tests.labels_party.conftest import TOKENS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

TABLE = [("advertiser", b"tok-a"), ("publisher", b"tok-p"), ("operator", b"tok-o")]


@pytest.mark.parametrize(
    ("header", "found"),
    [
        ("Bearer tok-a", "advertiser"), ("bearer tok-p", "publisher"),
        ("BEARER  tok-o ", "operator"),
        (None, None), ("", None), ("Bearer", None), ("Bearer ", None), ("Basic tok-a", None),
        ("Bearer tok-a2", None), ("Bearer tok-", None), ("tok-a", None),
    ],
)  # fmt: skip
def test_match_token(header: str | None, found: str | None) -> None:
    assert match_token(header, TABLE) == found


@given(st.text(max_size=40))
def test_match_token_finds_exactly_the_presented_token(token: str) -> None:
    expected = next((name for name, t in TABLE if t == token.strip().encode()), None)
    if not token.strip():
        expected = None
    assert match_token(f"Bearer {token}", TABLE) == expected
    assert presented_token(f"Bearer {token}") == (token.strip().encode() or None)


def test_match_token_compares_every_token(monkeypatch: Any) -> None:
    """No early exit: the time does not depend on which token matched."""
    import hmac

    calls: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(b)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert match_token("Bearer tok-a", TABLE) == "advertiser"
    assert calls == [t for _, t in TABLE]


def test_unauthorized_is_the_one_401() -> None:
    problem = unauthorized()
    assert (problem.status, problem.detail, problem.headers) == (
        401, MISSING_OR_INVALID, {"WWW-Authenticate": "Bearer"},
    )  # fmt: skip
    assert problem.errors == [("Authorization", MISSING_OR_INVALID)]


def test_media_checks() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert require_media(None, JSON_MEDIA) == ""
    assert require_media("text/csv; header=present", {"text/csv": 1}) == "text/csv"
    with pytest.raises(HTTPProblem) as refused:
        require_media("text/xml", ("application/json", "text/csv"))
    assert refused.value.status == 415
    assert refused.value.errors == [("Content-Type", "must be one of application/json, text/csv")]


def _app() -> FastAPI:
    app = FastAPI(title="kit")
    http_errors.install(app, logging.getLogger("kit"))

    @app.get("/items")
    def items(request: Request, limit: int = Query(10)) -> dict[str, int]:
        check_query(request)
        return {"limit": limit}

    @app.post("/json", dependencies=[Depends(require_json)])
    def post_json() -> dict[str, bool]:
        return {"ok": True}

    openapi.install(app, security={"bearer": {"type": "http", "scheme": "bearer"}})
    return app


def test_query_media_and_openapi_through_an_app() -> None:
    client = TestClient(_app())
    assert client.get("/items?limit=3").json() == {"limit": 3}
    typo = client.get("/items?limt=3&limit=1&limit=2")
    assert typo.status_code == 422
    assert typo.json() == {
        "detail": "invalid query string",
        "errors": [
            {"field": "query.limt", "message": "unknown query parameter"},
            {"field": "query.limit", "message": "given more than once"},
        ],
    }
    assert client.post("/json", json={}).status_code == 200
    assert client.post("/json", content=b"{}").status_code == 200  # no Content-Type: JSON
    wrong = client.post("/json", content=b"a", headers={"Content-Type": "text/plain"})
    assert wrong.status_code == 415 and wrong.json()["errors"][0]["field"] == "Content-Type"
    schema = client.get("/openapi.json").json()
    assert "ErrorBody" in schema["components"]["schemas"]
    responses = schema["paths"]["/items"]["get"]["responses"]
    assert "422" not in responses and {"4XX", "5XX"} <= set(responses)
    assert schema["paths"]["/items"]["get"]["security"] == [{"bearer": []}]


# ---- both services answer through the kit in the same words ----------------------------------


@pytest.fixture
def both(tmp_path: Path) -> Iterator[dict[str, TestClient]]:
    from features_party.config import Settings as FeaturesSettings
    from features_party.main import create_app as features_app
    from labels_party.main import create_app as labels_app
    from tests.labels_party.conftest import make_settings

    features = FeaturesSettings(
        db_path=tmp_path / "features.db",
        labels_url="http://127.0.0.1:9",
        labels_token="publisher-token-xxxxxxxx",
        features_token="features-token-xxxxxxxx",
    )
    with (
        TestClient(labels_app(make_settings(tmp_path / "labels.db"))) as labels,
        TestClient(features_app(features)) as feats,
    ):
        yield {"labels": labels, "features": feats}


AUTHED = {"labels": f"Bearer {TOKENS.operator}", "features": "Bearer features-token-xxxxxxxx"}


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic abc"])
def test_the_same_401_in_both_services(both: dict[str, TestClient], header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    answers = [both[name].get("/v1/datasets", headers=headers) for name in ("labels", "features")]
    for answer in answers:
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
    assert (
        answers[0].json()
        == answers[1].json()
        == {
            "detail": MISSING_OR_INVALID,
            "errors": [{"field": "Authorization", "message": MISSING_OR_INVALID}],
        }
    )


def test_the_same_query_check_in_both_services(both: dict[str, TestClient]) -> None:
    bodies = []
    for name in ("labels", "features"):
        answer = both[name].get("/v1/datasets?x=1", headers={"Authorization": AUTHED[name]})
        assert answer.status_code == 422
        bodies.append(answer.json())
    assert bodies[0] == bodies[1]


def test_a_trailing_slash_is_an_unknown_route_in_both_services(
    both: dict[str, TestClient],
) -> None:
    """Issue 24.7: ``GET /v1/datasets/x/`` was a 307 to ``/v1/datasets/x``; the docs say 404."""
    for name, path in (("labels", "/v1/datasets/x/"), ("features", "/v1/models/")):
        answer = both[name].get(
            path, headers={"Authorization": AUTHED[name]}, follow_redirects=False
        )
        assert answer.status_code == 404, (name, answer.status_code)
        assert set(answer.json()) == {"detail", "errors"}


def test_healthz_says_unavailable_when_the_database_cannot_be_written(
    both: dict[str, TestClient], tmp_path: Path
) -> None:
    """Issue 24.7: /healthz said ok while every write failed (the database file immutable)."""
    import subprocess

    files = [tmp_path / "labels.db", tmp_path / "features.db"]
    for name in ("labels", "features"):
        assert both[name].get("/healthz").status_code == 200
    frozen = subprocess.run(["chattr", "+i", *map(str, files)], capture_output=True, check=False)
    if frozen.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {frozen.stderr.decode().strip()}")
    try:
        for name in ("labels", "features"):
            answer = both[name].get("/healthz")
            assert answer.status_code == 503, (name, answer.text)
            body = answer.json()
            assert body["status"] == "unavailable"
            assert body["errors"][0]["field"] == "database", body
    finally:
        subprocess.run(["chattr", "-i", *map(str, files)], check=True)
    for name in ("labels", "features"):
        assert both[name].get("/healthz").status_code == 200


def test_the_same_415_in_both_services(both: dict[str, TestClient]) -> None:
    calls = {"labels": "/v1/datasets", "features": "/v1/models"}
    bodies = []
    for name, url in calls.items():
        answer = both[name].post(
            url, content=b"x", headers={"Authorization": AUTHED[name], "Content-Type": "text/xml"}
        )
        assert answer.status_code == 415, answer.text
        bodies.append(answer.json())
    assert bodies[0] == bodies[1]


def test_a_service_app_counts_every_request_and_lets_nothing_escape() -> None:
    from contextlib import asynccontextmanager

    from shared.service.http.app import add_outer_layers, service_app

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> Iterator[None]:  # type: ignore[misc]
        yield

    class CatchAll(http_errors.CatchAllMiddleware):
        logger = logging.getLogger("test-kit")

    app = service_app(title="t", summary="a test service", lifespan=lifespan)
    seen: list[tuple[str, str, int]] = []

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("label 41.5 leaked")

    add_outer_layers(
        app, record=lambda *, method, route, status: seen.append((method, route, status)),
        catch_all=CatchAll,
    )  # fmt: skip
    info = app.openapi()["info"]
    assert (info["title"], info["summary"], info["version"]) == ("t", "a test service", "1")
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/boom")
    assert answer.status_code == 500 and "41.5" not in answer.text
    assert set(answer.json()) == {"detail", "errors"}
    assert seen == [("GET", "/boom", 500)]


def test_http_middleware_passes_anything_but_http_through_untouched() -> None:
    import asyncio

    from shared.service.http.middleware import HTTPMiddleware

    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(f"app:{scope['type']}")

    class Tagging(HTTPMiddleware):
        async def handle(self, scope: Any, receive: Any, send: Any) -> None:
            seen.append("handled")
            await self.app(scope, receive, send)

    async def run() -> None:
        for kind in ("lifespan", "websocket", "http"):
            await Tagging(app)({"type": kind}, None, None)

    asyncio.run(run())
    assert seen == ["app:lifespan", "app:websocket", "handled", "app:http"]


def test_an_error_body_repeats_at_most_500_characters_of_any_text() -> None:
    """A message may name what was sent (an unknown mechanism): a 100 KB one came back whole
    (found by a fuzzer). Each text is cut at MAX_ERROR_TEXT with an ellipsis."""
    from shared.service.http.errors import MAX_ERROR_TEXT, error_shape

    long = "x" * 100_000
    body = error_shape(long, [("mechanism", f"mechanism ({long!r}) must be one of a, b")])
    texts = [body["detail"], body["errors"][0]["message"]]
    assert all(len(text) == MAX_ERROR_TEXT and text.endswith("\u2026") for text in texts)
    short = error_shape("bad", [("field", "ok")])
    assert short == {"detail": "bad", "errors": [{"field": "field", "message": "ok"}]}
