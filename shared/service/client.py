"""Typed httpx clients for the two services: the labels party and the features party.

Used by the ``labeldp`` CLI, the demo, the features party's message pull and the tests. Every
call goes through one request path with a bounded retry policy:

* idempotent calls (GET, label / example / feature ingest, which the services make idempotent)
  are retried on connection errors, timeouts and 5xx answers, with exponential back-off;
* a release carries an ``Idempotency-Key`` (one per call) and is retried like them: a repeat
  gets the first answer from the labels party and spends nothing
  (``labels_party.budget.idempotency``);
* non-idempotent calls (create a dataset, start a training job) are retried only when the
  request provably never reached the server (``httpx.ConnectError``).

A non-2xx answer raises :class:`ServiceError` carrying the HTTP status and the service's JSON
error (``{"detail": ..., "errors": [{"field", "message"}]}``); exhausting the retries raises
:class:`ServiceUnavailableError` naming the URL, the attempts and the last failure.
"""

from __future__ import annotations

import json
import math
import secrets
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import quote, urlsplit

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.errors import IntegrityError, InvalidParameterError, LabelDPError
from shared.message import (
    BINARY_MEDIA_TYPE,
    JSON_MEDIA_TYPE,
    MessageHeader,
    decode_binary,
    from_json_message,
)
from shared.service.tls import client_context

# --------------------------------------------------------------------------------------------
# Errors and retry policy
# --------------------------------------------------------------------------------------------


def _segment(value: str) -> str:
    """One URL path segment, percent-encoded (``/``, ``..`` and friends cannot change the path)."""
    return quote(str(value), safe="")


class ServiceError(LabelDPError):
    """A service answered with an error status (4xx / 5xx); carries its JSON error body."""

    def __init__(
        self,
        *,
        status: int | None,
        method: str,
        url: str,
        detail: str,
        errors: Sequence[Mapping[str, Any]] = (),
        body: Any = None,
    ) -> None:
        self.status = status
        self.method = method
        self.url = url
        self.detail = detail
        self.errors = [dict(error) for error in errors]
        self.body = body
        where = f"{method} {url}"
        fields = "; ".join(
            f"{error.get('field', '?')}: {error.get('message', '')}" for error in self.errors
        )
        status_text = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"{where} -> {status_text}: {detail}" + (f" ({fields})" if fields else ""))


class ServiceUnavailableError(ServiceError):
    """The service could not be reached (or kept failing with 5xx) after every retry."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Bounded exponential back-off: ``attempts`` tries, delays base * factor^k up to max_delay."""

    attempts: int = 5
    base_delay: float = 0.2
    factor: float = 2.0
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise InvalidParameterError(f"attempts ({self.attempts!r}) must be an integer")
        if self.attempts < 1:
            raise InvalidParameterError(f"attempts ({self.attempts}) must be >= 1")
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidParameterError(f"{name} ({value!r}) must be finite and >= 0")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise InvalidParameterError(f"factor ({self.factor!r}) must be finite and >= 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        return min(self.base_delay * self.factor**attempt, self.max_delay)


NO_RETRY = RetryPolicy(attempts=1)


def _error_from_response(response: httpx.Response) -> ServiceError:
    """Build the exception for a non-2xx answer, keeping the service's JSON error."""
    body: Any
    try:
        body = response.json()
    except ValueError:
        body = response.text[:2000]
    detail = ""
    errors: list[Mapping[str, Any]] = []
    if isinstance(body, dict):
        raw_detail = body.get("detail", "")
        if isinstance(raw_detail, str):
            detail = raw_detail
        else:  # FastAPI's default validation body: a list of {loc, msg}
            detail = json.dumps(raw_detail)[:2000]
        raw_errors = body.get("errors") or []
        if isinstance(raw_errors, list):
            errors = [error for error in raw_errors if isinstance(error, dict)]
    else:
        detail = str(body)
    cls = ServiceUnavailableError if response.status_code >= 500 else ServiceError
    return cls(
        status=response.status_code,
        method=response.request.method,
        url=str(response.request.url),
        detail=detail or response.reason_phrase,
        errors=errors,
        body=body,
    )


def http_base_url(url: str, *, name: str = "base URL") -> str:
    """``url`` if it is an http(s) URL naming a host (what a service client can call), else an
    InvalidParameterError naming ``name`` (``ftp://``, ``host:port`` without a scheme and ``""``
    were an httpx traceback at the first request: found by an audit)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidParameterError(f"{name} ({url!r}) must start with http:// or https://")
    return url


class _ServiceClient:
    """Shared request machinery: base URL, bearer token, timeouts, bounded retries."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        ca_file: str | Path | None = None,
    ) -> None:
        """``ca_file``: trust only this CA for https (a private CA, ``shared.service.tls``)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = http_base_url(base_url).rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        verify: ssl.SSLContext | bool = True if ca_file is None else client_context(ca_file)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            verify=verify,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        json_body: Any = None,
        content: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> httpx.Response:
        """Send one request with the retry policy; return the 2xx response or raise."""
        last: str = ""
        attempts = self.retry.attempts
        for attempt in range(attempts):
            try:
                response = self._http.request(
                    method,
                    path,
                    json=json_body,
                    content=content,
                    headers=dict(headers or {}),
                    params=dict(params or {}),
                )
            except httpx.ConnectError as exc:  # never reached the server: always safe to retry
                last = f"connection failed: {exc}"
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if not idempotent:
                    raise ServiceUnavailableError(
                        status=None,
                        method=method,
                        url=f"{self.base_url}{path}",
                        detail=f"{type(exc).__name__}: {exc} (not retried: the request may "
                        "have been applied; check its state before repeating it)",
                    ) from exc
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    return response
                error = _error_from_response(response)
                if response.status_code < 500 or not idempotent:
                    raise error
                last = str(error)
            if attempt + 1 < attempts:
                self._sleep(self.retry.delay(attempt))
        key = (headers or {}).get(IDEMPOTENCY_KEY)
        repeat = (
            ""
            if key is None
            else f"; it may have been applied: repeat it with idempotency_key={key!r} to get its "
            "answer without applying it twice"
        )
        raise ServiceUnavailableError(
            status=None,
            method=method,
            url=f"{self.base_url}{path}",
            detail=f"gave up after {attempts} attempt(s); last failure: {last}{repeat}",
        )

    def _json(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any:
        return self.request(method, path, idempotent=idempotent, **kwargs).json()

    def _post_csv(self, path: str, csv: str, params: dict[str, str]) -> Any:
        """POST one text/csv upload batch (idempotent: each batch is stored atomically)."""
        return self._json(
            "POST",
            path,
            idempotent=True,
            content=csv.encode("utf-8"),
            headers={"Content-Type": "text/csv"},
            params=params,
        )

    def healthz(self) -> dict[str, Any]:
        """``GET /healthz`` (no token needed)."""
        return self._json("GET", "/healthz", idempotent=True)

    def metrics(self) -> str:
        """``GET /metrics`` in Prometheus text format."""
        return self.request("GET", "/metrics", idempotent=True).text


# --------------------------------------------------------------------------------------------
# Labels party
# --------------------------------------------------------------------------------------------


class _Lenient(BaseModel):
    """Response models keep fields they do not name (forward compatible with the service)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class DatasetInfo(_Lenient):
    """``GET /v1/datasets/{name}`` on the labels party."""

    name: str
    label_min: float
    label_max: float
    default_label: float
    # Exact decimal amounts (the service sends decimal strings).
    epsilon_budget: Decimal
    epsilon_spent: Decimal = Decimal(0)
    epsilon_left: Decimal | None = None
    n_examples: int | None = None  # registered example ids (every role may see it)
    segment_column: str | None = None  # the public attribute releases segment by (if any)


class ReleaseInfo(_Lenient):
    """Metadata of one release (never the labels)."""

    id: str
    dataset: str
    mechanism: str
    params: dict[str, Any] = {}
    epsilon1: Decimal  # the exact charges: epsilon1 + epsilon2 == epsilon
    epsilon2: Decimal
    epsilon: Decimal
    n: int
    message_sha256: str | None = None
    expected_label_mse: float | None = None


@dataclass(frozen=True, kw_only=True)
class PulledMessage:
    """A downloaded and verified message: header, example ids, noisy labels, raw encoding."""

    header: MessageHeader
    example_ids: list[str]
    noisy_labels: np.ndarray
    raw: bytes
    media_type: str


def parse_message(raw: bytes, media_type: str) -> tuple[MessageHeader, list[str], np.ndarray]:
    """Decode and verify a message in either encoding (raises :class:`IntegrityError`)."""
    if media_type.startswith(BINARY_MEDIA_TYPE):
        return decode_binary(raw)
    if media_type.startswith(JSON_MEDIA_TYPE):
        return from_json_message(raw)
    raise IntegrityError(f"unexpected message media type {media_type!r}")


class LabelsPartyClient(_ServiceClient):
    """The advertiser's service (labels, budgets, releases, ledger); see labels_party/API.md."""

    # -- operator --------------------------------------------------------------------------
    def create_dataset(
        self,
        name: str,
        *,
        label_min: float,
        label_max: float,
        default_label: float,
        epsilon_budget: float,
        segment_column: str | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/datasets`` (operator): public label bounds and the epsilon budget; with
        ``segment_column``, a dataset whose releases are segmented by that public attribute."""
        body: dict[str, Any] = {
            "name": name,
            "label_min": label_min,
            "label_max": label_max,
            "default_label": default_label,
            "epsilon_budget": epsilon_budget,
        }
        if segment_column is not None:
            body["segment_column"] = segment_column
        return self._json("POST", "/v1/datasets", idempotent=False, json_body=body)

    def ledger(self, **params: Any) -> Any:
        """``GET /v1/ledger`` (operator): every spend, hash-chained."""
        return self._json("GET", "/v1/ledger", idempotent=True, params=params)

    # -- any role --------------------------------------------------------------------------
    def dataset(self, name: str) -> DatasetInfo:
        """``GET /v1/datasets/{name}``: bounds, counts, state, budget spent and left."""
        return DatasetInfo.model_validate(
            self._json("GET", f"/v1/datasets/{_segment(name)}", idempotent=True)
        )

    def release(self, release_id: str) -> ReleaseInfo:
        """``GET /v1/releases/{id}``: release metadata."""
        return ReleaseInfo.model_validate(
            self._json("GET", f"/v1/releases/{_segment(release_id)}", idempotent=True)
        )

    # -- publisher -------------------------------------------------------------------------
    def register_examples(
        self, name: str, example_ids: Iterable[str], *, segments: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """``POST /v1/datasets/{name}/examples`` (publisher), as text/plain one id per line;
        with ``segments`` (a segmented dataset: one per id), as JSON."""
        if segments is not None:
            return self._json(
                "POST",
                f"/v1/datasets/{_segment(name)}/examples",
                idempotent=True,
                json_body={"example_ids": list(example_ids), "segments": list(segments)},
            )
        text = "\n".join(example_ids) + "\n"
        return self._json(
            "POST",
            f"/v1/datasets/{_segment(name)}/examples",
            idempotent=True,
            content=text.encode("utf-8"),
            headers={"Content-Type": "text/plain"},
        )

    def receipt(self, release_id: str) -> dict[str, Any]:
        """The release's signed receipt (verify it with ``shared.service.receipt.verify``)."""
        return self._json(  # type: ignore[no-any-return]
            "GET", f"/v1/releases/{_segment(release_id)}/receipt", idempotent=True
        )

    def public_keys(self) -> list[dict[str, Any]]:
        """The labels party's published receipt keys (current and retired)."""
        return self._json("GET", "/v1/keys", idempotent=True)["keys"]  # type: ignore[no-any-return]

    def download_message(self, release_id: str, *, binary: bool = True) -> PulledMessage:
        """``GET /v1/releases/{id}/message``; the content is verified before it is returned."""
        accept = BINARY_MEDIA_TYPE if binary else JSON_MEDIA_TYPE
        response = self.request(
            "GET",
            f"/v1/releases/{_segment(release_id)}/message",
            idempotent=True,
            headers={"Accept": accept},
        )
        media_type = response.headers.get("content-type", "")
        raw = response.content
        header, example_ids, noisy = parse_message(raw, media_type)
        if header.release_id != release_id:
            raise IntegrityError(
                f"asked for release {release_id!r}, the message is for {header.release_id!r}"
            )
        return PulledMessage(
            header=header,
            example_ids=example_ids,
            noisy_labels=noisy,
            raw=raw,
            media_type=media_type.split(";")[0].strip(),
        )

    # -- advertiser ------------------------------------------------------------------------
    def post_labels(
        self,
        name: str,
        example_ids: Sequence[str],
        values: Sequence[float] | np.ndarray,
        *,
        overwrite: bool = False,
        batch_size: int = 200_000,
    ) -> list[dict[str, Any]]:
        """``POST /v1/datasets/{name}/labels`` (advertiser) as text/csv, in atomic batches."""
        if len(example_ids) != len(values):
            raise InvalidParameterError(
                f"{len(example_ids)} example ids but {len(values)} label values"
            )
        array = np.asarray(values, dtype=np.float64)
        params = {"overwrite": "true"} if overwrite else {}
        answers = []
        for start in range(0, len(example_ids), batch_size):
            ids = example_ids[start : start + batch_size]
            chunk = array[start : start + batch_size]
            lines = [f"{eid},{float(v)!r}" for eid, v in zip(ids, chunk, strict=True)]
            csv = "example_id,value\n" + "\n".join(lines) + "\n"
            answers.append(self._post_csv(f"/v1/datasets/{_segment(name)}/labels", csv, params))
        return answers

    def create_release(
        self,
        name: str,
        *,
        epsilon: Decimal | float | str,
        mechanism: str = "auto",
        epsilon_histogram: Decimal | float | str | None = None,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ReleaseInfo:
        """``POST /v1/datasets/{name}/releases`` (advertiser): spend epsilon, store ONE message.

        Amounts: a float is sent as a JSON number (0.1 is the decimal 0.1), a Decimal or string
        as a decimal string, exactly. Sent with ``idempotency_key`` (default: a fresh random
        one), so that a retry after a lost answer gets the same release, spending nothing; give
        your own to repeat the call safely from another process (a job's name and run).
        """
        body = _release_body(
            epsilon=epsilon, mechanism=mechanism, epsilon_histogram=epsilon_histogram, params=params
        )
        key = new_idempotency_key() if idempotency_key is None else idempotency_key
        return ReleaseInfo.model_validate(
            self._json(
                "POST",
                f"/v1/datasets/{_segment(name)}/releases",
                idempotent=True,
                json_body=body,
                headers={IDEMPOTENCY_KEY: key},
            )
        )

    def preview_release(self, name: str, **request: Any) -> dict[str, Any]:
        """The plan of a release (``dry_run``): what it would spend on what; spends nothing.

        Takes :meth:`create_release`'s keyword arguments.
        """
        body = _release_body(**request) | {"dry_run": True}
        return self._json(
            "POST", f"/v1/datasets/{_segment(name)}/releases", idempotent=True, json_body=body
        )


IDEMPOTENCY_KEY = "Idempotency-Key"


def new_idempotency_key() -> str:
    """A fresh random ``Idempotency-Key`` (128 bits from the OS CSPRNG, URL-safe text)."""
    return secrets.token_urlsafe(16)


def _amount(value: Decimal | float | str) -> float | str:
    return str(value) if isinstance(value, Decimal) else value


def _release_body(
    *,
    epsilon: Decimal | float | str,
    mechanism: str = "auto",
    epsilon_histogram: Decimal | float | str | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"mechanism": mechanism, "epsilon": _amount(epsilon)}
    if epsilon_histogram is not None:
        body["epsilon_histogram"] = _amount(epsilon_histogram)
    if params:
        body["params"] = dict(params)
    return body


# --------------------------------------------------------------------------------------------
# Features party
# --------------------------------------------------------------------------------------------


class FeatureUploadResult(BaseModel):
    """Answer to a feature upload (one atomic batch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    received: int
    inserted: int
    unchanged: int
    replaced: int
    rows_total: int
    columns: dict[str, str]


class ModelInfo(BaseModel):
    """A training job and, once it succeeded, its fitted model's metadata."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    dataset: str
    release_id: str
    model: str
    label_transform: str
    status: Literal["queued", "running", "succeeded", "failed"]
    stage: str
    progress: float
    error: str | None = None
    created: str
    finished: str | None = None
    result: dict[str, Any] | None = None


def _csv_cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = repr(float(value)) if isinstance(value, float | np.floating) else str(value)
    if any(ch in text for ch in ',"\n\r'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def columns_to_csv(
    example_ids: Sequence[str], columns: Mapping[str, Sequence[Any] | np.ndarray]
) -> str:
    """A CSV with header ``example_id,<columns...>`` (empty cell = missing)."""
    names = list(columns)
    lines = [",".join(["example_id", *names])]
    arrays = [np.asarray(columns[name]) for name in names]
    for name, array in zip(names, arrays, strict=True):
        if len(array) != len(example_ids):
            raise InvalidParameterError(
                f"column {name!r} has {len(array)} values for {len(example_ids)} example ids"
            )
    for i, eid in enumerate(example_ids):
        lines.append(",".join([eid, *(_csv_cell(_jsonable(array[i])) for array in arrays)]))
    return "\n".join(lines) + "\n"


class FeaturesPartyClient(_ServiceClient):
    """The publisher's service (features, message pull, training, prediction)."""

    def upload_features(
        self,
        name: str,
        example_ids: Sequence[str],
        columns: Mapping[str, Sequence[Any] | np.ndarray],
        *,
        overwrite: bool = False,
        categorical: Sequence[str] = (),
        batch_size: int = 50_000,
    ) -> list[FeatureUploadResult]:
        """``POST /v1/datasets/{name}/features`` as CSV, in atomic batches of ``batch_size``."""
        params: dict[str, str] = {}
        if overwrite:
            params["overwrite"] = "true"
        if categorical:
            params["categorical"] = ",".join(categorical)
        answers = []
        for start in range(0, len(example_ids), batch_size):
            stop = start + batch_size
            chunk = {key: np.asarray(values)[start:stop] for key, values in columns.items()}
            csv = columns_to_csv(example_ids[start:stop], chunk)
            answer = self._post_csv(f"/v1/datasets/{_segment(name)}/features", csv, params)
            answers.append(FeatureUploadResult.model_validate(answer))
        return answers

    def dataset(self, name: str) -> dict[str, Any]:
        """``GET /v1/datasets/{name}``: row count and column kinds."""
        return self._json("GET", f"/v1/datasets/{_segment(name)}", idempotent=True)

    def sync_examples(self, name: str) -> dict[str, Any]:
        """``POST /v1/datasets/{name}/examples/sync``: register every example id upstream."""
        return self._json("POST", f"/v1/datasets/{_segment(name)}/examples/sync", idempotent=True)

    def create_model(
        self,
        *,
        dataset: str,
        release_id: str,
        model: str = "auto",
        label_transform: str = "auto",
        seed: int | None = None,
    ) -> ModelInfo:
        """``POST /v1/models``: start a background training job (returns at once)."""
        body: dict[str, Any] = {"dataset": dataset, "release_id": release_id, "model": model}
        body |= {"label_transform": label_transform, "seed": seed}  # seed null: the server's
        return ModelInfo.model_validate(
            self._json("POST", "/v1/models", idempotent=False, json_body=body)
        )

    def model(self, model_id: str) -> ModelInfo:
        """``GET /v1/models/{id}``: status, stage, progress, result."""
        return ModelInfo.model_validate(
            self._json("GET", f"/v1/models/{_segment(model_id)}", idempotent=True)
        )

    def models(self) -> list[ModelInfo]:
        """``GET /v1/models``."""
        answer = self._json("GET", "/v1/models", idempotent=True)
        return [ModelInfo.model_validate(item) for item in answer["models"]]

    def wait_model(
        self,
        model_id: str,
        *,
        timeout: float = 600.0,
        interval: float = 0.2,
        on_progress: Callable[[ModelInfo], None] | None = None,
    ) -> ModelInfo:
        """Poll until the job has finished; raise :class:`ServiceError` if it failed."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.model(model_id)
            if on_progress is not None:
                on_progress(info)
            if info.status == "succeeded":
                return info
            if info.status == "failed":
                raise ServiceError(
                    status=None,
                    method="GET",
                    url=f"{self.base_url}/v1/models/{model_id}",
                    detail=f"training job failed: {info.error}",
                )
            if time.monotonic() > deadline:
                raise ServiceError(
                    status=None,
                    method="GET",
                    url=f"{self.base_url}/v1/models/{model_id}",
                    detail=f"training job still {info.status} after {timeout:g} s",
                )
            time.sleep(interval)

    def predict(
        self,
        model_id: str,
        *,
        rows: Sequence[Mapping[str, Any]] | None = None,
        example_ids: Sequence[str] | None = None,
    ) -> np.ndarray:
        """``POST /v1/models/{id}/predict`` on feature rows or on stored example ids."""
        if (rows is None) == (example_ids is None):
            raise InvalidParameterError("give exactly one of rows or example_ids")
        body = {"rows": list(rows)} if rows is not None else {"example_ids": list(example_ids)}
        answer = self._json(
            "POST", f"/v1/models/{_segment(model_id)}/predict", idempotent=True, json_body=body
        )
        return np.asarray(answer["predictions"], dtype=np.float64)

    def predict_columns(
        self,
        model_id: str,
        columns: Mapping[str, Sequence[Any] | np.ndarray],
        *,
        batch_size: int = 20_000,
    ) -> np.ndarray:
        """Predict for feature columns (not stored anywhere), in batches."""
        names = list(columns)
        arrays = [np.asarray(columns[name]) for name in names]
        n = len(arrays[0]) if arrays else 0
        out: list[np.ndarray] = []
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            rows = [
                {
                    "features": {
                        name: _jsonable(array[i]) for name, array in zip(names, arrays, strict=True)
                    }
                }
                for i in range(start, stop)
            ]
            out.append(self.predict(model_id, rows=rows))
        return np.concatenate(out) if out else np.empty(0)


def _jsonable(value: Any) -> Any:
    item = value.item() if isinstance(value, np.generic) else value
    if isinstance(item, float) and not math.isfinite(item):
        return None
    return item
