"""Externally executed releases: charged BEFORE their noise is drawn, then published.

The job (``spark_release.job``) runs the SAME plan (``shared.plan.plan_release``) on its
driver and the same engine functions on its executors. Two calls, so that no randomized output
exists anywhere (staging included) without a ledger entry that paid for it:

1. :func:`charge`, before the job draws any noise: the labels party recomputes the plan from ITS
   dataset configuration (bounds) and the job's n, refuses any difference from the plan the job
   sent (and an n other than the registered examples'), and in ONE write transaction checks the
   budget, inserts the release row (``storage = "external"``, ``state = "charged"``, the request
   kept) and appends its ``histogram`` and ``randomizer`` entries (``accountant.spend``), as for
   its own releases; the randomizer entry names the requested mechanism (the chosen one is not
   drawn yet).
2. :func:`publish`, after the job wrote its message: the header must be what the charged plan
   produces; the job's universe digest must be the dataset's (its registered examples', else
   the one its first external release fixed). Then the header is kept, the state becomes
   ``released`` and a ``publication`` entry (epsilon 0) names the chosen randomizer, its
   parameters and the message's sha256. The job publishes its message only after this returns.

A job that fails after the charge calls :func:`fail`: the state becomes ``failed``, a ``failure``
entry (epsilon 0) says why, and the charge stays (the noise may have been drawn). Replaying a
charge or a publication with the same content returns the recorded release without spending
again, so a job that lost an answer can ``--resume``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select, update

from labels_party.budget import ledger
from labels_party.catalog import datasets as ds
from labels_party.db.engine import Database
from labels_party.db.models import datasets, instance_secrets, releases
from labels_party.errors import BadInputError, ConflictError, FieldError, NotFoundError
from labels_party.releasing.releases import (
    _public,
    paid_columns,
    plan_for,
    release_charges,
    store_and_spend,
)
from shared.errors import InvalidParameterError
from shared.mechanisms import registry
from shared.mechanisms.histogram import bin_edges
from shared.message import (
    FORMAT_VERSION,
    NO_MECHANISM,
    RELEASE_ID_PATTERN,
    MessageHeader,
    UniverseDigest,
    json_safe,
)
from shared.plan import AUTO, ReleasePlan, ReleaseRequest

EXTERNAL = "external"


def header_bytes(header: MessageHeader) -> bytes:
    """header.json as the job writes it and the labels party hashes it (pydantic's JSON)."""
    return header.model_dump_json().encode("utf-8")


def _refuse(field: str, message: str) -> BadInputError:
    return BadInputError(
        f"the external release does not match the labels party's plan: {field} {message}",
        [FieldError(field=field, message=message)],
    )


def parse_header(raw: dict[str, Any]) -> MessageHeader:
    """The header as the wire format has it, strictly: JSON types only (a boolean or a string
    where a number belongs, a number as ``created``, were coerced, stored and signed)."""
    try:
        return MessageHeader.model_validate_json(json.dumps(raw), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "header." + ".".join(str(part) for part in first["loc"])
        raise BadInputError(
            "invalid message header", [FieldError(field=where, message=first["msg"])]
        ) from None


def check_against_plan(
    header: MessageHeader, plan: ReleasePlan, row: ds.DatasetRow, *, requested: str
) -> None:
    """Refuse a header whose public values are not what ``plan`` on ``row`` produces."""
    if header.format_version != FORMAT_VERSION:
        raise _refuse("header.format_version", f"must be {FORMAT_VERSION}")
    if not re.fullmatch(RELEASE_ID_PATTERN, header.release_id):
        raise _refuse("header.release_id", "must be rel_ and 24 hex digits")
    if header.dataset != row.name:
        raise _refuse("header.dataset", f"must be {row.name!r}")
    if header.n != plan.n:
        raise _refuse("header.n", f"must equal n ({plan.n})")
    expected: dict[str, Any] = {
        "epsilon1": plan.epsilon1_float,
        "epsilon2": plan.randomizer_float,
        "label_min": row.label_min,
        "label_max": row.label_max,
        "default_label": row.default_label,
        "model_dim": plan.model_dim,
        "label_mean_epsilon": plan.label_mean_float,
        "label_mean_variance": plan.label_mean_variance,
    }
    for key, value in expected.items():
        if getattr(header, key) != value:
            raise _refuse(f"header.{key}", f"must be {value!r} (the plan's)")
    if (header.label_mean is None) != (plan.label_mean_float is None):
        raise _refuse("header.label_mean", "present exactly when the plan buys a DP mean")
    edges = bin_edges(lo=plan.lo, hi=plan.hi, bins=plan.bins).tolist()
    if header.histogram.edges != edges:
        raise _refuse("header.histogram.edges", f"must be the plan's {plan.bins} cells")
    if not math.isclose(sum(header.histogram.probs), 1.0, abs_tol=1e-9):
        raise _refuse("header.histogram.probs", "must sum to 1")
    if header.mechanism == NO_MECHANISM or requested not in (AUTO, header.mechanism):
        raise _refuse("header.mechanism", f"is not what {requested!r} may choose")
    _check_params(header, plan)


def _check_params(header: MessageHeader, plan: ReleasePlan) -> None:
    """Refuse a randomizer that did not run as charged: at the plan's epsilon2, with its options.

    The randomizer ran at the epsilon2 the charge paid for: its own parameters say so (every
    family's carry the epsilon it was built at), and they rebuild it (which re-checks the
    unbiased randomizer's integer weights against that epsilon, exactly). The options the charge
    named are the family's parameters of the same name.
    """
    ran_at = header.params.get("epsilon")
    if isinstance(ran_at, bool) or not isinstance(ran_at, int | float):
        ran_at = None  # (an int is compared exactly: a 400-digit one overflowed float())
    if ran_at is None or ran_at != plan.randomizer_float:
        raise _refuse(
            "header.params.epsilon", f"must be {plan.randomizer_float!r} (the plan's epsilon2)"
        )
    for key, value in plan.options.items():
        if value is not None and key in header.params and header.params[key] != value:
            raise _refuse(f"header.params.{key}", f"must be {value!r} (the charged option)")
    try:
        rebuilt = registry.get(header.mechanism).from_params(dict(header.params))
    except (InvalidParameterError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise _refuse("header.params", str(exc)[:200]) from None
    if json_safe(rebuilt.public_params()) != header.params:
        # What the features party will read is exactly the randomizer's own description (a
        # string where numbers belong was parsed leniently by the rebuild, then stored as sent).
        raise _refuse("header.params", "must be the randomizer's own parameters, as it states them")


CHARGED, RELEASED, FAILED = "charged", "released", "failed"
LABELS_INPUT_KEY = "labels_input"  # the instance_secrets row (migration 0013)


def _request_text(request: ReleaseRequest, *, n: int, labels_hmac: str | None) -> str:
    """What a charge paid for, as kept in the release row (canonical JSON)."""
    return ledger.canonical_json({"request": request.public(), "n": n, "labels_hmac": labels_hmac})


def labels_input_hmac(conn: Any, labels_sha256: str) -> str:
    """HMAC-SHA256 of the job's labels input digest under this database's key (migration
    0013): what the release row and the ledger keep, never the digest itself, which whoever
    reads the ledger could test guessed labels against. Equal inputs still give equal values
    within one database (``ledger verify`` matches them). The key is in the database: whoever
    reads the database FILE can still test a guessed input's exact bytes (an audit's finding;
    that reader holds every label the service itself stores); the API's and an exported
    ledger's readers cannot."""
    if not re.fullmatch(r"[0-9a-f]{64}", labels_sha256):
        raise _refuse("labels_sha256", "must be 64 lowercase hex digits")
    key = conn.execute(
        select(instance_secrets.c.value).where(instance_secrets.c.name == LABELS_INPUT_KEY)
    ).scalar_one()
    return hmac.new(key, labels_sha256.encode("ascii"), hashlib.sha256).hexdigest()


def _request_of(text: str) -> ReleaseRequest:
    """The :class:`ReleaseRequest` a charge kept (:func:`_request_text`)."""
    public = json.loads(text)["request"]
    share = public["epsilon_histogram"]
    return ReleaseRequest(
        epsilon=Decimal(public["epsilon"]),
        mechanism=public["mechanism"],
        epsilon_histogram=None if share is None else Decimal(share),
        bins=public["bins"],
        model_dim=public["model_dim"],
        options=public["options"],
    )


def charge(
    db: Database,
    *,
    dataset: str,
    request: ReleaseRequest,
    n: int,
    release_id: str,
    plan_given: dict[str, Any],
    labels_sha256: str | None = None,
    actor_role: str,
    actor: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Charge an external release before its noise is drawn; (its metadata, whether new)."""
    if not re.fullmatch(RELEASE_ID_PATTERN, release_id):
        raise _refuse("release_id", "must be rel_ and 24 hex digits")
    with db.read() as conn:
        row = ds.load(conn, dataset)
        universe = dataset_universe(db, conn, row)
    ds.refuse_archived(row)
    if universe is not None and n != universe.n:
        raise _refuse("n", f"must be {universe.n}, the number of {universe.what}")
    plan = plan_for(row, request, n=n)
    ours = json_safe(plan.public())
    # The explanation last: it restates the others, so a difference names its cause first.
    for key in sorted(set(ours) | set(plan_given), key=lambda k: (k == "explanation", k)):
        if key not in ours or key not in plan_given or _typed(ours[key]) != _typed(plan_given[key]):
            raise _refuse(f"plan.{key}", f"must be {ours.get(key)!r} (recomputed here)")
    created = ds.utc_now()
    with db.read() as conn:
        keyed = None if labels_sha256 is None else labels_input_hmac(conn, labels_sha256)
    record_ = {
        "id": release_id,
        "requested_mechanism": request.mechanism,
        "mechanism": request.mechanism,  # the chosen one is recorded at publication
        "params": "{}",
        **paid_columns(plan),
        "created": created,
        "message_sha256": "",
        "binary_sha256": "",
        "binary_size": 0,
        "actor_role": actor_role,
        "actor": actor,
        "storage": EXTERNAL,
        "state": CHARGED,
        "external_request": _request_text(request, n=n, labels_hmac=keyed),
    }
    charges = release_charges(
        plan,
        requested_mechanism=request.mechanism,
        header=None,
        bins=plan.bins,
        inputs={"labels_input_hmac": keyed} if keyed else None,
    )
    with db.write() as conn:
        current = ds.load(conn, row.name, for_update=True)
        ds.refuse_archived(current)
        existing = conn.execute(select(releases).where(releases.c.id == release_id)).first()
        if existing is not None:
            same = (
                existing.storage == EXTERNAL
                and existing.dataset_id == row.id
                and existing.external_request == record_["external_request"]
            )
            if not same:
                raise ConflictError(
                    f"release {release_id!r} exists with other content",
                    [FieldError(field="release_id", message="already used")],
                )
            return _view(existing, dataset=row.name), False
        _refuse_changed_universe(conn, current, universe)
        store_and_spend(conn, current, record_, charges, plan, time=created)
        # Spent, so frozen, as the service's release freezes in its spend's transaction: no
        # example or label may change between a charge and its publication (an example
        # registered meanwhile made the publication impossible and the charge a loss).
        conn.execute(update(datasets).where(datasets.c.id == row.id).values(state=ds.RELEASED))
    return _view(record_, dataset=row.name), True


def _charged(conn: Any, row: ds.DatasetRow, release_id: str) -> Any:
    """The external release ``release_id`` of ``row`` charged in two steps (404 otherwise)."""
    rel = conn.execute(select(releases).where(releases.c.id == release_id)).first()
    if rel is None or rel.dataset_id != row.id or rel.state is None:
        raise NotFoundError(
            f"no external release {release_id!r} charged to dataset {row.name!r}",
            [FieldError(field="release_id", message="not charged here")],
        )
    return rel


def publish(
    db: Database,
    *,
    dataset: str,
    release_id: str,
    universe_sha256: str,
    header_raw: dict[str, Any],
    actor_role: str,
    actor: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Record the message of a charged external release; (its metadata, whether new)."""
    header = parse_header(header_raw)
    if header.release_id != release_id:
        raise _refuse("header.release_id", f"must be {release_id!r}")
    with db.read() as conn:
        row = ds.load(conn, dataset)
        rel = _charged(conn, row, release_id)
        universe = dataset_universe(db, conn, row)
    request = _request_of(rel.external_request)
    plan = plan_for(row, request, n=rel.n)
    check_against_plan(header, plan, row, requested=request.mechanism)
    text = header_bytes(header)
    if rel.state == FAILED:
        raise ConflictError(
            f"release {release_id!r} was marked failed; its charge stays, nothing is published",
            [FieldError(field="release_id", message="failed")],
        )
    # A replay too: the dataset's universe is frozen once it is released, so an honest replay
    # names the same one.
    check_universe(row.name, n=rel.n, universe_sha256=universe_sha256, universe=universe)
    if rel.state == RELEASED:
        if rel.external_header != text.decode("utf-8"):
            raise ConflictError(
                f"release {release_id!r} was published with another header",
                [FieldError(field="header", message="differs from the published one")],
            )
        return _view(rel, dataset=row.name), False
    digest = hashlib.sha256(text).hexdigest()
    with db.write() as conn:
        current = ds.load(conn, row.name, for_update=True)
        ds.refuse_archived(current)
        if _charged(conn, current, release_id).state != CHARGED:
            raise ConflictError(
                f"release {release_id!r} changed state during the check; retry",
                [FieldError(field="release_id", message="changed state")],
            )
        _refuse_changed_universe(conn, current, universe)
        values = {
            "mechanism": header.mechanism,
            "params": ledger.canonical_json(json_safe(header.params)),
            "message_sha256": header.body_sha256,
            "binary_sha256": digest,
            "binary_size": len(text),
            "external_header": text.decode("utf-8"),
            "state": RELEASED,
        }
        conn.execute(update(releases).where(releases.c.id == release_id).values(**values))
        ledger.record_event(
            conn,
            time=ds.utc_now(),
            dataset=row.name,
            release_id=release_id,
            kind=ledger.KIND_PUBLICATION,
            mechanism=header.mechanism,
            actor_role=actor_role,
            actor=actor,
            parameters={
                "params": json_safe(header.params),
                "recommended_transform": header.recommended_transform,
                "universe_sha256": universe_sha256,
                "header_sha256": digest,
            },
            message_sha256=header.body_sha256,
        )
        # A lake universe is fixed by the dataset's first external release.
        first_lake = current.n_examples == 0 and current.universe_sha256 is None
        fixed = {"universe_sha256": universe_sha256} if first_lake else {}
        conn.execute(
            update(datasets).where(datasets.c.id == current.id).values(state=ds.RELEASED, **fixed)
        )
        published = conn.execute(select(releases).where(releases.c.id == release_id)).first()
    return _view(published, dataset=row.name), True


def fail(
    db: Database,
    *,
    dataset: str,
    release_id: str,
    reason: str,
    actor_role: str,
    actor: str | None = None,
) -> dict[str, Any]:
    """Mark a charged external release failed (its charge stays); idempotent. The one write an
    archived dataset still takes: it closes the books on a charge made before the archive (a
    job that failed after it), adding a ledger entry and no data or spend."""
    with db.write() as conn:
        row = ds.load(conn, dataset, for_update=True)
        rel = _charged(conn, row, release_id)
        if rel.state == FAILED:
            return _view(rel, dataset=row.name)
        if rel.state != CHARGED:
            raise ConflictError(
                f"release {release_id!r} is published; it cannot fail any more",
                [FieldError(field="release_id", message="published")],
            )
        conn.execute(update(releases).where(releases.c.id == release_id).values(state=FAILED))
        ledger.record_event(
            conn,
            time=ds.utc_now(),
            dataset=row.name,
            release_id=release_id,
            kind=ledger.KIND_FAILURE,
            actor_role=actor_role,
            actor=actor,
            parameters={"reason": reason},
        )
        failed = conn.execute(select(releases).where(releases.c.id == release_id)).first()
    return _view(failed, dataset=row.name)


def _view(record: Any, *, dataset: str) -> dict[str, Any]:
    """An external release as the API shows it (``releases._public``; bins from its header)."""
    get = record.get if isinstance(record, dict) else record._mapping.get
    bins = None
    if get("external_header"):
        header = MessageHeader.model_validate_json(get("external_header"))
        bins = None if header.histogram is None else len(header.histogram.probs)
    return _public(record, dataset=dataset, bins=bins)


def registered_universe(db: Database, conn: Any, row: ds.DatasetRow) -> tuple[int, str]:
    """(n, ``shared.message.universe_digest``) of the dataset's registered example ids, read
    in the message's order (ascending id), in pieces."""
    digest = UniverseDigest()
    count = 0
    cursor = conn.connection.driver_connection.cursor()
    try:
        cursor.execute(
            db.sql(
                "SELECT example_id FROM entries WHERE dataset_id = ? AND registered = 1 "
                "ORDER BY example_id"
            ),
            (row.id,),
        )
        while batch := cursor.fetchmany(65_536):
            digest.update("\n".join(example_id for (example_id,) in batch).encode("utf-8"))
            count += len(batch)
    finally:
        cursor.close()
    return count, digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Universe:
    """The example ids every release of a dataset must cover: its registered examples' when it
    has some, else (a lake dataset) those of its first external release."""

    n: int
    sha256: str
    registered: bool

    @property
    def what(self) -> str:
        return (
            "registered examples" if self.registered else "ids its first external release covered"
        )


def dataset_universe(db: Database, conn: Any, row: ds.DatasetRow) -> Universe | None:
    """The dataset's :class:`Universe`; None for a lake dataset before its first publication.
    Examples are only ever added (and refused once the dataset is released), so ``n_examples``
    versions the registered universe; a lake universe's n is its first external release's (every
    later one is refused unless it has the same n and digest)."""
    if row.n_examples:
        count, digest = registered_universe(db, conn, row)
        return Universe(n=count, sha256=digest, registered=True)
    if row.universe_sha256 is None:
        return None
    first = conn.execute(
        select(releases.c.n)
        .where(
            releases.c.dataset_id == row.id,
            releases.c.storage == EXTERNAL,
            releases.c.state == RELEASED,
        )
        .order_by(releases.c.created, releases.c.id)
        .limit(1)
    ).scalar_one()
    return Universe(n=int(first), sha256=row.universe_sha256, registered=False)


def _refuse_changed_universe(conn: Any, current: ds.DatasetRow, universe: Universe | None) -> None:
    """Inside the write transaction: refuse (409, retry) if examples were registered, or a first
    external release fixed a lake universe, since ``universe`` was read."""
    registered = universe.n if universe is not None and universe.registered else 0
    lake = None if universe is None or universe.registered else universe.sha256
    if current.n_examples != registered or (not registered and current.universe_sha256 != lake):
        raise ConflictError(
            f"dataset {current.name!r}: its universe of example ids changed during the check; "
            "retry",
            [FieldError(field="dataset", message="examples changed")],
        )


def check_universe(
    dataset: str, *, n: int, universe_sha256: str, universe: Universe | None
) -> None:
    """Refuse an external release over another universe than the dataset's (issue 24): the
    registered examples' (``n`` and digest, 422), else the one its first external release fixed
    (n and digest, 409): a job cannot charge this dataset for other labels."""
    if universe is None:
        return
    checks = (("n", n == universe.n), ("universe_sha256", universe_sha256 == universe.sha256))
    for name, same in checks:
        if same:
            continue
        if universe.registered:
            raise _refuse(
                name, f"must be the registered examples' {'count' if name == 'n' else 'digest'}"
            )
        raise ConflictError(
            f"dataset {dataset!r} was first released over another universe of example ids",
            [
                FieldError(
                    field=name,
                    message="differs from the universe of the dataset's first external release",
                )
            ],
        )


def _typed(value: Any) -> str:
    """A JSON value with its types (1, 1.0 and true differ): how a plan's entries compare."""
    return json.dumps(value, sort_keys=True)
