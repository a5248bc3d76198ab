"""The authorization matrix: every endpoint x every role, no token, a bad token."""

from __future__ import annotations

import itertools

import pytest

from labels_party.config import Tokens, load_tokens
from shared.errors import InvalidParameterError
from tests.labels_party.conftest import TOKENS, create_dataset, register, release

_counter = itertools.count()

# (method, path template, body builder, content type, roles allowed; None = no auth needed)
ENDPOINTS = [
    ("POST", "/v1/datasets", "dataset", None, {"operator"}),
    ("GET", "/v1/datasets/ds", None, None, {"advertiser", "publisher", "operator"}),
    ("POST", "/v1/datasets/open/examples", "examples", None, {"publisher"}),
    ("POST", "/v1/datasets/open/labels", "labels", None, {"advertiser"}),
    ("POST", "/v1/datasets/open/labels", "csv", "text/csv", {"advertiser"}),
    ("POST", "/v1/datasets/ds/releases", "release", None, {"advertiser"}),
    ("GET", "/v1/releases/{rid}", None, None, {"advertiser", "publisher", "operator"}),
    ("GET", "/v1/releases/{rid}/message", None, None, {"advertiser", "publisher"}),
    ("GET", "/v1/ledger", None, None, {"operator"}),
    ("GET", "/metrics", None, None, {"operator"}),
    ("GET", "/healthz", None, None, None),
]
CALLERS = ["advertiser", "publisher", "operator", "none", "bad", "wrong-scheme", "empty"]


def _headers(caller: str) -> dict[str, str]:
    if caller in ("advertiser", "publisher", "operator"):
        return {"Authorization": f"Bearer {getattr(TOKENS, caller)}"}
    return {
        "none": {},
        "bad": {"Authorization": "Bearer not-a-real-token-000000"},
        "wrong-scheme": {"Authorization": f"Basic {TOKENS.operator}"},
        "empty": {"Authorization": "Bearer "},
    }[caller]


def _body(kind: str | None) -> dict:
    n = next(_counter)
    if kind == "dataset":
        return {"json": {"name": f"new{n}", "label_min": 0, "label_max": 1, "default_label": 0,
                         "epsilon_budget": 1}}  # fmt: skip
    if kind == "examples":
        return {"json": {"example_ids": [f"m{n}"]}}
    if kind == "labels":
        return {"json": {"labels": [{"example_id": f"l{n}", "value": 0.5}]}}
    if kind == "csv":
        return {"content": f"example_id,value\nc{n},0.5\n".encode()}
    if kind == "release":
        return {"json": {"mechanism": "rpwithprior", "epsilon": 0.01}}
    return {}


@pytest.fixture(scope="module")
def matrix_client(tmp_path_factory):
    from tests.labels_party.conftest import TestClient, create_app, make_settings

    app = create_app(make_settings(tmp_path_factory.mktemp("auth") / "auth.db"))
    with TestClient(app, raise_server_exceptions=False) as client:
        create_dataset(client, "ds", epsilon_budget=1000.0)
        create_dataset(client, "open")
        register(client, "ds", ["a", "b"])
        rid = release(client, "ds", epsilon=0.01).json()["id"]
        client.rid = rid  # type: ignore[attr-defined]
        yield client


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: f"{e[0]} {e[1]} {e[2] or ''}")
def test_authorization_matrix(matrix_client, endpoint, caller):
    method, path, body, content_type, allowed = endpoint
    headers = _headers(caller)
    if content_type:
        headers["content-type"] = content_type
    url = path.replace("{rid}", matrix_client.rid)
    response = matrix_client.request(method, url, headers=headers, **_body(body))
    if allowed is None or caller in (allowed or set()):
        assert response.status_code in (200, 201), response.text
    elif caller in ("advertiser", "publisher", "operator"):
        assert response.status_code == 403, response.text
        assert response.json()["errors"][0]["field"] == "Authorization"
    else:
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"] == "Bearer"
        assert set(response.json()) == {"detail", "errors"}


def test_auth_comes_before_body_validation(matrix_client):
    """A caller without the right role learns nothing from the body checks."""
    bad_json = {"content": b"{not json", "headers": {"content-type": "application/json"}}
    anonymous = matrix_client.post("/v1/datasets/ds/releases", **bad_json)
    assert anonymous.status_code == 401
    publisher = matrix_client.post(
        "/v1/datasets/ds/releases",
        content=b"{not json",
        headers={"content-type": "application/json", **_headers("publisher")},
    )
    assert publisher.status_code == 403
    unknown = matrix_client.post("/v1/datasets/nope/labels", json={}, headers=_headers("publisher"))
    assert unknown.status_code == 403  # not 404: dataset existence is not revealed either


@pytest.mark.parametrize(
    "path",
    [
        "/v1/datasets",
        "/v1/datasets/ds/budget",
        "/v1/datasets/ds/archive",
        "/v1/datasets/ds/releases",
        "/v1/datasets/ds/external-releases",
        "/v1/datasets/ds/external-releases/rel_0123456789abcdef01234567/publication",
        "/v1/datasets/ds/external-releases/rel_0123456789abcdef01234567/failure",
        "/v1/datasets/ds/model-releases",
    ],
)
@pytest.mark.parametrize(
    ("content", "kind"),
    [(b"", "application/json"), (b'{"a": 1, "a": 2}', "application/json"), (b"x", "text/xml")],
)
def test_every_typed_body_is_read_only_after_the_token(matrix_client, path, content, kind):
    """Empty, repeated-key and non-JSON bodies: 401 without a token, never the body's error."""
    answer = matrix_client.post(path, content=content, headers={"content-type": kind})
    assert answer.status_code == 401, (path, answer.text)
    assert answer.json()["errors"][0]["field"] == "Authorization"


def test_docs_are_public(matrix_client):
    assert matrix_client.get("/openapi.json").status_code == 200


def test_tokens_refused_when_missing_or_unsafe(tmp_path):
    with pytest.raises(InvalidParameterError, match="no tokens"):
        load_tokens(environ={})
    with pytest.raises(InvalidParameterError, match="missing token"):
        load_tokens(environ={"LABELDP_TOKENS": "advertiser=a1,publisher=p1"})
    with pytest.raises(InvalidParameterError, match="distinct"):
        load_tokens(environ={"LABELDP_TOKENS": "advertiser=x,publisher=x,operator=y"})
    with pytest.raises(InvalidParameterError, match="non-empty"):
        load_tokens(environ={"LABELDP_TOKENS": "advertiser=,publisher=x,operator=y"})
    with pytest.raises(InvalidParameterError, match="unknown role"):
        load_tokens(environ={"LABELDP_TOKENS": "advertiser=a,publisher=p,operator=o,root=r"})
    good = load_tokens(environ={"LABELDP_TOKENS": " advertiser=a1 , publisher=p1,operator=o1"})
    assert good == Tokens(advertiser="a1", publisher="p1", operator="o1")
    path = tmp_path / "tokens.json"
    path.write_text('{"advertiser": "A", "publisher": "P", "operator": "O"}')
    assert load_tokens(tokens_file=path, environ={}).publisher == "P"
    path.write_text('{"advertiser": "A", "publisher": "P"}')
    with pytest.raises(InvalidParameterError, match="operator"):
        load_tokens(tokens_file=path, environ={})
    path.write_text("not json")
    with pytest.raises(InvalidParameterError, match="not valid JSON"):
        load_tokens(tokens_file=path, environ={})
    # Found by the CLI audit: a role given twice kept the last silently (LABELDP_TOKENS refuses
    # it), and a file that is not UTF-8 was a traceback.
    path.write_text('{"advertiser": "A", "advertiser": "Z", "publisher": "P", "operator": "O"}')
    with pytest.raises(InvalidParameterError, match="gives a role twice: advertiser"):
        load_tokens(tokens_file=path, environ={})
    path.write_bytes('{"advertiser": "A"}'.encode("utf-16"))
    with pytest.raises(InvalidParameterError, match="is not UTF-8 text"):
        load_tokens(tokens_file=path, environ={})
