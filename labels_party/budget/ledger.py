"""The privacy-budget ledger: an append-only, hash-chained record of every spend.

Each entry commits to (seq, time, dataset, release, kind, mechanism, epsilon, actor role,
parameters, message sha256, previous entry hash): ``entry_hash = sha256(canonical JSON)``, so
editing, deleting or reordering any entry breaks every later hash. Entries are appended only
inside a write transaction (SQLite's single write lock), which makes "read the head, append"
atomic. A release appends two entries in the transaction that stores its message: ``histogram``
(epsilon1) and ``randomizer`` (epsilon2). Dataset creation appends a ``dataset`` entry
(epsilon 0) recording the budget and the public label bounds.

:func:`verify` recomputes the chain and cross-checks it against the datasets, the releases and
the stored messages (what ``labeldp ledger verify`` runs). A chain a database owner rewrites
wholesale stays self-consistent: keep the printed head hash somewhere else to detect that.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TextIO

from sqlalchemy import Connection, func, insert, select

from labels_party.db.models import (
    PART_HEAD,
    datasets,
    ledger,
    message_chunks,
    model_releases,
    releases,
)
from shared import epsilon as amounts

GENESIS_HASH = "0" * 64
KIND_DATASET, KIND_HISTOGRAM, KIND_RANDOMIZER = "dataset", "histogram", "randomizer"
# Entries that spend nothing: an operator's budget top-up, and archiving a dataset.
KIND_TOPUP, KIND_ARCHIVE = "topup", "archive"
# An (epsilon, delta) model release (labels_party.releasing.model_releases): one entry, its id in
# the parameters (``model_release_id``), the model message's body sha256 as ``message_sha256``.
KIND_MODEL = "model"
# An external release charged before its noise (labels_party.releasing.external_releases): its
# histogram and randomizer entries carry no message; a ``publication`` entry (epsilon 0) then names
# the chosen randomizer and the message, or a ``failure`` entry (epsilon 0) says why there is none.
KIND_PUBLICATION, KIND_FAILURE = "publication", "failure"
# A budget a database held outside the amount range, repaired by a migration (epsilon 0; actor
# role ``migration``): parameters name the ``field``, what was ``stored`` and the new value under
# the field's name; the recorded entries stay as they were (labels_party migration 0012).
KIND_REPAIR = "repair"
REPAIRABLE = ("epsilon_budget", "delta_budget")
COLUMNS = (
    "seq",
    "time",
    "dataset",
    "release_id",
    "kind",
    "mechanism",
    "epsilon",
    "actor_role",
    "parameters",
    "message_sha256",
    "prev_hash",
    "entry_hash",
)


# The CSV export: every hashed column, then the (epsilon, delta) spend's delta and the principal.
CSV_COLUMNS = (*COLUMNS, "delta", "actor")


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, shortest round-trip floats, NaN/inf refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def entry_hash(entry: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of every field but ``entry_hash`` itself.

    An entry with an exact amount commits to its decimal text as ``epsilon`` (and ``delta`` when
    it has one); an older entry to its float, as it was written. An entry naming its principal
    commits to it as ``actor`` (entries without one hash as they always did).
    """
    payload = {key: entry[key] for key in COLUMNS if key != "entry_hash"}
    if entry.get("actor") is not None:
        payload["actor"] = entry["actor"]
    if entry.get("epsilon_exact") is not None:
        payload["epsilon"] = entry["epsilon_exact"]
    if entry.get("delta_exact") is not None:
        payload["delta"] = entry["delta_exact"]
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def amount(entry: dict[str, Any]) -> Decimal:
    """The entry's epsilon, exactly (an older entry's float at its exact binary value)."""
    return stored_amount(entry.get("epsilon_exact"), entry["epsilon"])


def delta(entry: dict[str, Any]) -> Decimal:
    """The entry's delta (0 when it has none)."""
    text = entry.get("delta_exact")
    return Decimal(text) if text is not None else Decimal(0)


def stored_amount(exact_text: str | None, legacy: float | None) -> Decimal:
    """An amount as stored: its exact text, else (an older database) its float taken exactly."""
    if exact_text is not None:
        return Decimal(exact_text)
    return Decimal(0) if legacy is None else Decimal(float(legacy))


def head(conn: Connection) -> tuple[int, str]:
    """(last seq, last entry hash), or (0, GENESIS_HASH) for an empty ledger."""
    row = conn.execute(
        select(ledger.c.seq, ledger.c.entry_hash).order_by(ledger.c.seq.desc()).limit(1)
    ).first()
    return (0, GENESIS_HASH) if row is None else (int(row.seq), str(row.entry_hash))


def append(
    conn: Connection,
    *,
    time: str,
    dataset: str,
    release_id: str | None,
    kind: str,
    mechanism: str | None,
    epsilon: Decimal,
    actor_role: str,
    parameters: dict[str, Any],
    message_sha256: str | None,
    delta: Decimal | None = None,
    actor: str | None = None,
) -> dict[str, Any]:
    """Append one entry with an exact amount (call inside a write transaction); ``actor``: the
    named principal who acted (None: a role-only token, or no request)."""
    seq, prev = head(conn)
    entry: dict[str, Any] = {
        "seq": seq + 1,
        "time": time,
        "dataset": dataset,
        "release_id": release_id,
        "kind": kind,
        "mechanism": mechanism,
        "epsilon": float(epsilon),
        "epsilon_exact": amounts.text(epsilon),
        "delta_exact": None if delta is None else amounts.text(delta),
        "actor_role": actor_role,
        "actor": actor,
        "parameters": canonical_json(parameters),
        "message_sha256": message_sha256,
        "prev_hash": prev,
    }
    entry["entry_hash"] = entry_hash(entry)
    conn.execute(insert(ledger).values(**entry))
    return entry


def record_event(
    conn: Connection,
    *,
    time: str,
    dataset: str,
    kind: str,
    actor_role: str,
    parameters: dict[str, Any],
    actor: str | None = None,
    release_id: str | None = None,
    mechanism: str | None = None,
    message_sha256: str | None = None,
) -> dict[str, Any]:
    """Append an entry that spends nothing (a dataset's creation, a top-up, an archive; an
    external release's publication or failure)."""
    return append(
        conn,
        time=time,
        dataset=dataset,
        release_id=release_id,
        kind=kind,
        mechanism=mechanism,
        epsilon=Decimal(0),
        actor_role=actor_role,
        parameters=parameters,
        message_sha256=message_sha256,
        actor=actor,
    )


def entries(
    conn: Connection, *, dataset: str | None = None, after: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    """Ledger entries in chain order (``parameters`` as stored: canonical JSON text)."""
    query = select(ledger).where(ledger.c.seq > after).order_by(ledger.c.seq)
    if dataset is not None:
        query = query.where(ledger.c.dataset == dataset)
    if limit is not None:
        query = query.limit(limit)
    return [dict(row._mapping) for row in conn.execute(query)]


def public_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the API returns it: parameters parsed, amounts as exact decimal strings."""
    out = {key: value for key, value in entry.items() if key not in _EXACT_COLUMNS}
    out["epsilon"] = _text(amount(entry))
    if entry.get("delta_exact") is not None:
        out["delta"] = entry["delta_exact"]
    out["parameters"] = json.loads(entry["parameters"])
    return out


_EXACT_COLUMNS = ("epsilon_exact", "delta_exact")


def _text(value: Decimal) -> str:
    return "0" if value == 0 else amounts.text(value)


@dataclass
class VerifyReport:
    """What :func:`verify` found."""

    entries: int = 0
    head_hash: str = GENESIS_HASH
    spent: dict[str, Decimal] = field(default_factory=dict)
    delta_spent: dict[str, Decimal] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _iter_ledger(conn: Connection) -> Iterator[dict[str, Any]]:
    for row in conn.execute(select(ledger).order_by(ledger.c.seq)):
        yield dict(row._mapping)


@dataclass
class _Walk:
    """What one pass over the ledger collects for :func:`verify`'s later checks."""

    spends: dict[str, list[Decimal]] = field(default_factory=lambda: defaultdict(list))
    delta_spends: dict[str, list[Decimal]] = field(default_factory=lambda: defaultdict(list))
    model_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_release: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    labels_inputs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add(self, entry: dict[str, Any], epsilon: Decimal) -> list[str]:
        """File one valid entry by kind; the problems it shows on its own."""
        seq, kind, name = entry["seq"], entry["kind"], entry["dataset"]
        if kind == KIND_DATASET:
            problems = [f"entry seq {seq}: dataset {name!r} created twice"] * (name in self.created)
            self.created[name] = json.loads(entry["parameters"])
            return problems
        if kind == KIND_TOPUP:
            return self._top_up(entry, epsilon)
        if kind == KIND_ARCHIVE:
            if name not in self.created or epsilon != 0:
                return [f"entry seq {seq}: an archive of no created dataset, or spending"]
            return []
        if kind in (KIND_HISTOGRAM, KIND_RANDOMIZER):
            return self._release_spend(entry, epsilon)
        if kind in (KIND_PUBLICATION, KIND_FAILURE):
            return self._release_event(entry, epsilon)
        if kind == KIND_REPAIR:
            return self._repair(entry, epsilon)
        if kind == KIND_MODEL:
            self.spends[name].append(epsilon)
            self.delta_spends[name].append(delta(entry))
            model_id = json.loads(entry["parameters"]).get("model_release_id")
            if not isinstance(model_id, str) or model_id in self.model_entries:
                return [f"entry seq {seq}: a model spend without its own model release"]
            self.model_entries[model_id] = entry
            return []
        return [f"entry seq {seq}: unknown kind {kind!r}"]

    def _top_up(self, entry: dict[str, Any], epsilon: Decimal) -> list[str]:
        seq = entry["seq"]
        params = json.loads(entry["parameters"])
        budgets = self.created.get(entry["dataset"])
        if budgets is None or epsilon != 0:
            return [f"entry seq {seq}: a top-up of no created dataset, or spending"]
        before = _param_amount(budgets["epsilon_budget"])
        raised = amounts.add(before, Decimal(params["add"]))
        budgets["epsilon_budget"] = params["epsilon_budget"]
        if raised != Decimal(params["epsilon_budget"]):
            return [f"entry seq {seq}: the top-up's budgets do not add up"]
        return []

    def _repair(self, entry: dict[str, Any], epsilon: Decimal) -> list[str]:
        """A budget repaired into the range: it follows ``shared.epsilon.budget_as_read`` from
        what it says was stored, and what was stored is what the ledger recorded (else the row
        had been edited by hand: said, the repair applied all the same)."""
        seq = entry["seq"]
        params = json.loads(entry["parameters"])
        budgets = self.created.get(entry["dataset"])
        field = params.get("field")
        if budgets is None or epsilon != 0 or field not in REPAIRABLE:
            return [f"entry seq {seq}: a repair of no created dataset's budget, or spending"]
        was = amounts.stored(str(params.get("stored")), None)
        repaired = amounts.stored(str(params.get(field)), None)
        if repaired.is_nan() or repaired != amounts.budget_as_read(was):
            return [f"entry seq {seq}: the repair's {field} is not the stored one in range"]
        recorded = _param_amount(budgets.get(field)) or Decimal(0)
        budgets[field] = params[field]
        if was.is_nan() or recorded != was:
            return [
                f"entry seq {seq}: {field} of {entry['dataset']!r} was {params.get('stored')} "
                f"when repaired; the ledger had recorded {_text(recorded)}"
            ]
        return []

    def _release_spend(self, entry: dict[str, Any], epsilon: Decimal) -> list[str]:
        seq, kind = entry["seq"], entry["kind"]
        self.spends[entry["dataset"]].append(epsilon)
        params = json.loads(entry["parameters"])
        # labels_input_hmac from migration 0013 on; labels_input_sha256 in older entries.
        digest = params.get("labels_input_hmac", params.get("labels_input_sha256"))
        if isinstance(digest, str):
            self.labels_inputs[digest].add(entry["dataset"])
        release_id = entry["release_id"]
        if release_id is None:
            return [f"entry seq {seq}: a spend without a release id"]
        if kind in self.by_release[release_id]:
            return [f"entry seq {seq}: release {release_id} has two {kind} entries"]
        self.by_release[release_id][kind] = entry
        return []

    def _release_event(self, entry: dict[str, Any], epsilon: Decimal) -> list[str]:
        """A charged external release's publication or failure: spends nothing, once."""
        seq, kind, release_id = entry["seq"], entry["kind"], entry["release_id"]
        if epsilon != 0 or release_id is None:
            return [f"entry seq {seq}: a {kind} that spends, or names no release"]
        if kind in self.by_release[release_id]:
            return [f"entry seq {seq}: release {release_id} has two {kind} entries"]
        self.by_release[release_id][kind] = entry
        return []

    def shared_labels(self) -> list[str]:
        """One set of labels paid from two budgets: each budget holds, their sum does not."""
        return [
            f"labels input {digest[:16]} was charged to {len(charged)} datasets: "
            + ", ".join(repr(name) for name in sorted(charged))
            for digest, charged in sorted(self.labels_inputs.items())
            if len(charged) > 1
        ]


def verify(conn: Connection, *, check_messages: bool = True) -> VerifyReport:
    """Recompute the chain, the per-dataset totals and the release/message links: one pass
    over the ledger (:func:`_walk`), then the datasets, the label releases and the model
    releases against what it collected."""
    report = VerifyReport()
    walk = _walk(conn, report)
    report.problems.extend(walk.shared_labels())
    stored = {row.name: row for row in conn.execute(select(datasets))}
    for name, row in stored.items():
        try:
            report.problems.extend(_check_dataset(name, row, walk, report))
        except _MALFORMED as exc:
            report.problems.append(
                f"dataset {name!r}: its row or creation entry is malformed ({type(exc).__name__})"
            )
    for name in set(walk.spends) | set(walk.created):
        if name not in stored:
            report.problems.append(f"ledger names dataset {name!r}, which does not exist")
    names_by_id = {row.id: name for name, row in stored.items()}
    report.problems.extend(_check_releases(conn, walk, names_by_id, check_messages))
    report.problems.extend(_check_model_releases(conn, walk.model_entries, names_by_id))
    return report


def _walk(conn: Connection, report: VerifyReport) -> _Walk:
    """The hash chain entry by entry (sequence, links, hashes, amounts), filing each entry."""
    walk = _Walk()
    problems = report.problems
    prev, expected_seq = GENESIS_HASH, 1
    for entry in _iter_ledger(conn):
        report.entries += 1
        seq = entry["seq"]
        if seq != expected_seq:
            problems.append(f"entry seq {seq}: expected seq {expected_seq} (gap or reorder)")
        expected_seq = seq + 1
        if entry["prev_hash"] != prev:
            problems.append(f"entry seq {seq}: prev_hash does not match the previous entry")
        if entry_hash(entry) != entry["entry_hash"]:
            problems.append(f"entry seq {seq}: entry_hash does not match its content")
        prev = entry["entry_hash"]
        epsilon = _valid_amount(entry)
        if epsilon is None:
            problems.append(
                f"entry seq {seq}: epsilon is not a number in [0, {amounts.MAX_AMOUNT}], or delta "
                "not one in [0, 1)"
            )
            continue
        if entry.get("epsilon_exact") is not None and float(epsilon) != entry["epsilon"]:
            problems.append(f"entry seq {seq}: epsilon column disagrees with its exact amount")
        if entry.get("delta_exact") is not None and not 0 < delta(entry) < 1:
            problems.append(f"entry seq {seq}: delta is not in (0, 1)")
        if not isinstance(_parameters(entry), dict):
            problems.append(f"entry seq {seq}: parameters is not a JSON object")
            continue
        try:
            problems.extend(walk.add(entry, epsilon))
        except _MALFORMED as exc:  # a row edited by hand: named, never a crash of the audit
            problems.append(
                f"entry seq {seq}: parameters malformed for a {entry['kind']!r} entry "
                f"({type(exc).__name__})"
            )
    report.head_hash = prev
    return walk


# What reading a hand-edited row's contents can raise; verify names the row instead.
_MALFORMED = (ArithmeticError, AttributeError, KeyError, TypeError, ValueError)


def _parameters(entry: dict[str, Any]) -> Any:
    """The entry's parameters as parsed JSON, None where the text is not JSON."""
    try:
        return json.loads(entry["parameters"])
    except (TypeError, ValueError, RecursionError):
        return None


def _valid_amount(entry: dict[str, Any]) -> Decimal | None:
    """The entry's epsilon if it is a number in [0, MAX_AMOUNT] (no accepted charge is larger)
    and its delta one in [0, 1), else None."""
    try:
        epsilon = amount(entry)
        dlt = delta(entry)
        valid = epsilon.is_finite() and 0 <= epsilon <= amounts.MAX_AMOUNT and 0 <= dlt < 1
    except _MALFORMED:
        return None
    return epsilon if valid else None


def _check_dataset(name: str, row: Any, walk: _Walk, report: VerifyReport) -> list[str]:
    """A dataset row against its ledger: exact columns, creation entry, totals, budget."""
    problems = []
    spent = amounts.add(*walk.spends.get(name, []))
    report.spent[name] = spent
    params = walk.created.get(name)
    budget = stored_amount(row.epsilon_budget_exact, row.epsilon_budget)
    for key in ("epsilon_budget", "epsilon_spent"):
        exact_text = getattr(row, f"{key}_exact")
        if exact_text is not None and float(Decimal(exact_text)) != getattr(row, key):
            problems.append(f"dataset {name!r}: {key} disagrees with its exact amount")
    if params is None:
        problems.append(f"dataset {name!r}: no creation entry in the ledger")
    else:
        for key in ("label_min", "label_max", "default_label"):
            if params.get(key) != getattr(row, key):
                problems.append(f"dataset {name!r}: {key} differs from its creation entry")
        if _param_amount(params.get("epsilon_budget")) != budget:
            problems.append(f"dataset {name!r}: epsilon_budget differs from its creation entry")
    if row.epsilon_spent_exact is not None:
        recorded = Decimal(row.epsilon_spent_exact)
        agrees = recorded == spent and float(recorded) == row.epsilon_spent
    else:  # an older database: the float total was the exact sum rounded up
        recorded = Decimal(row.epsilon_spent)
        agrees = _rounded_up(spent) == row.epsilon_spent
    if not agrees:
        problems.append(
            f"dataset {name!r}: ledger total {_text(spent)} != recorded epsilon_spent "
            f"{_text(recorded)}"
        )
    if spent > budget:
        problems.append(
            f"dataset {name!r}: spent {_text(spent)} exceeds the budget {_text(budget)}"
        )
    report.delta_spent[name] = amounts.add(*walk.delta_spends.get(name, []))
    problems.extend(_check_delta(name, row, params, walk.delta_spends.get(name, [])))
    return problems


def _check_releases(
    conn: Connection, walk: _Walk, names_by_id: dict[int, str], check_messages: bool
) -> list[str]:
    """Every label release has its two entries (amounts, sha256, dataset) and its message
    (stored chunks, or an external header), and every spend or message a release."""
    problems: list[str] = []
    chunk_counts = dict(
        conn.execute(
            select(message_chunks.c.release_id, func.count()).group_by(message_chunks.c.release_id)
        ).all()
    )
    seen: set[str] = set()
    for rel in conn.execute(select(releases)):
        seen.add(rel.id)
        try:
            problems.extend(
                _check_release(conn, rel, walk, names_by_id, chunk_counts, check_messages)
            )
        except _MALFORMED as exc:
            problems.append(f"release {rel.id}: malformed ({type(exc).__name__})")
    for release_id in walk.by_release:
        if release_id not in seen:
            problems.append(f"ledger spends for release {release_id}, which is not stored")
    for release_id in chunk_counts:
        if release_id not in seen:
            problems.append(f"a message is stored for unknown release {release_id}")
    return problems


def _check_release(
    conn: Connection,
    rel: Any,
    walk: _Walk,
    names_by_id: dict[int, str],
    chunk_counts: dict[str, int],
    check_messages: bool,
) -> list[str]:
    """One label release against its two ledger entries and its stored message."""
    pair = walk.by_release.get(rel.id, {})
    hist, rand = pair.get(KIND_HISTOGRAM), pair.get(KIND_RANDOMIZER)
    if hist is None or rand is None:
        return [f"release {rel.id}: missing its histogram or randomizer entry"]
    if rel.state is not None:
        return _check_charged_release(rel, pair, names_by_id, check_messages)
    problems = []
    dataset_name = names_by_id.get(rel.dataset_id)
    charged = (
        stored_amount(rel.epsilon1_exact, rel.epsilon1),
        stored_amount(rel.epsilon2_exact, rel.epsilon2),
    )
    if rel.epsilon_exact is not None and amounts.add(*charged) != Decimal(rel.epsilon_exact):
        problems.append(f"release {rel.id}: epsilon1 + epsilon2 != its epsilon")
    for entry, eps in ((hist, charged[0]), (rand, charged[1])):
        if amount(entry) != eps:
            problems.append(f"release {rel.id}: {entry['kind']} entry epsilon != release")
        if entry["message_sha256"] != rel.message_sha256:
            problems.append(f"release {rel.id}: {entry['kind']} entry sha256 != release")
        if entry["dataset"] != dataset_name:
            problems.append(f"release {rel.id}: {entry['kind']} entry names another dataset")
    if rel.storage is not None:  # executed outside (Spark): only its header is kept
        if chunk_counts.get(rel.id):
            problems.append(f"release {rel.id}: stored {rel.storage}ly but has chunks")
        elif check_messages:
            problems.extend(_check_external_header(rel))
    elif not chunk_counts.get(rel.id):
        problems.append(f"release {rel.id}: has ledger entries but no stored message")
    elif check_messages:
        problems.extend(_check_message(conn, rel))
    return problems


def _check_charged_release(
    rel: Any, entries: dict[str, dict[str, Any]], names_by_id: dict[int, str], check: bool
) -> list[str]:
    """An external release charged before its noise: its two spends carry no message; its
    state is what its publication or failure entry says
    (``labels_party.releasing.external_releases``)."""
    problems = []
    charged = (
        stored_amount(rel.epsilon1_exact, rel.epsilon1),
        stored_amount(rel.epsilon2_exact, rel.epsilon2),
    )
    for kind, eps in ((KIND_HISTOGRAM, charged[0]), (KIND_RANDOMIZER, charged[1])):
        entry = entries[kind]
        if amount(entry) != eps:
            problems.append(f"release {rel.id}: {kind} entry epsilon != release")
        if entry["message_sha256"] is not None:
            problems.append(f"release {rel.id}: {kind} entry names a message before the noise")
        if entry["dataset"] != names_by_id.get(rel.dataset_id):
            problems.append(f"release {rel.id}: {kind} entry names another dataset")
    published, failed = entries.get(KIND_PUBLICATION), entries.get(KIND_FAILURE)
    expected = {"charged": (False, False), "failed": (False, True), "released": (True, False)}
    if expected.get(rel.state) != (published is not None, failed is not None):
        return [*problems, f"release {rel.id}: state {rel.state!r} disagrees with its entries"]
    if published is not None:
        if (published["message_sha256"], published["mechanism"]) != (
            rel.message_sha256,
            rel.mechanism,
        ):
            problems.append(f"release {rel.id}: publication entry != release")
        if check:
            problems.extend(_check_external_header(rel))
    return problems


def _check_delta(
    name: str, row: Any, params: dict[str, Any] | None, deltas: list[Decimal]
) -> list[str]:
    """A dataset's delta total: the ledger's sum, recorded exactly, within its delta budget."""
    problems = []
    spent = amounts.add(*deltas)
    budget = stored_amount(row.delta_budget_exact, None)
    recorded = stored_amount(row.delta_spent_exact, None)
    if recorded != spent:
        problems.append(
            f"dataset {name!r}: ledger delta total {_text(spent)} != recorded delta_spent "
            f"{_text(recorded)}"
        )
    if spent > budget:
        problems.append(
            f"dataset {name!r}: delta spent {_text(spent)} exceeds the budget {_text(budget)}"
        )
    if params is not None and (_param_amount(params.get("delta_budget")) or 0) != budget:
        problems.append(f"dataset {name!r}: delta_budget differs from its creation entry")
    return problems


def _check_model_releases(
    conn: Connection, entries_by_id: dict[str, dict[str, Any]], names_by_id: dict[int, str]
) -> list[str]:
    """Every model release has its one ledger entry (same amounts, sha256, dataset) and back."""
    problems = []
    seen = set()
    for rel in conn.execute(select(model_releases)):
        seen.add(rel.id)
        try:
            problems.extend(_check_model_release(rel, entries_by_id.get(rel.id), names_by_id))
        except _MALFORMED as exc:
            problems.append(f"model release {rel.id}: malformed ({type(exc).__name__})")
    for model_id in entries_by_id:
        if model_id not in seen:
            problems.append(f"ledger spends for model release {model_id}, which is not stored")
    return problems


def _check_model_release(
    rel: Any, entry: dict[str, Any] | None, names_by_id: dict[int, str]
) -> list[str]:
    """One model release against its ledger entry and its stored message."""
    from shared.errors import IntegrityError
    from shared.model_message import verify_model

    if entry is None:
        return [f"model release {rel.id}: no ledger entry"]
    problems = []
    exact = (Decimal(rel.epsilon_exact), rel.delta_exact)
    if (amount(entry), entry.get("delta_exact")) != exact:
        problems.append(f"model release {rel.id}: ledger entry amounts != model release")
    if entry["message_sha256"] != rel.message_sha256:
        problems.append(f"model release {rel.id}: ledger entry sha256 != model release")
    if entry["dataset"] != names_by_id.get(rel.dataset_id):
        problems.append(f"model release {rel.id}: ledger entry names another dataset")
    try:
        header = verify_model(rel.message).header
    except IntegrityError as exc:
        return [*problems, f"model release {rel.id}: stored message is invalid: {exc}"]
    if (
        header.body_sha256 != rel.message_sha256
        or header.model_release_id != rel.id
        or header.epsilon != rel.epsilon_exact
        or header.delta != rel.delta_exact
    ):
        problems.append(f"model release {rel.id}: message header disagrees with the release")
    return problems


def _param_amount(value: Any) -> Decimal | None:
    """A budget as recorded in a creation entry: decimal text, or an older entry's float."""
    if isinstance(value, str):
        return Decimal(value)
    if isinstance(value, float | int) and not isinstance(value, bool):
        return Decimal(value)
    return None


def _rounded_up(exact: Decimal) -> float:
    nearest = float(exact)
    return math.nextafter(nearest, math.inf) if Decimal(nearest) < exact else nearest


def _check_message(conn: Connection, rel: Any) -> list[str]:
    """The stored chunks hash to the recorded digests and the header agrees with the release."""
    from shared.errors import IntegrityError
    from shared.message import decode_binary

    digest = hashlib.sha256()
    parts: list[bytes] = []
    size = 0
    header_chunk = b""
    query = (
        select(message_chunks.c.part, message_chunks.c.data)
        .where(message_chunks.c.release_id == rel.id)
        .order_by(message_chunks.c.seq)
    )
    for part, data in conn.execute(query):
        digest.update(data)
        size += len(data)
        parts.append(data)
        if part == PART_HEAD:
            header_chunk = data
    problems = []
    if digest.hexdigest() != rel.binary_sha256 or size != rel.binary_size:
        problems.append(f"release {rel.id}: stored message does not match its binary sha256")
    try:
        header, _ids, _labels = decode_binary(b"".join(parts))
    except IntegrityError as exc:
        return [*problems, f"release {rel.id}: stored message is invalid: {exc}"]
    if not header_chunk:
        problems.append(f"release {rel.id}: no header chunk")
    return problems + _header_problems(header, rel)


def _header_problems(header: Any, rel: Any) -> list[str]:
    """A message header against its release row (hash, id, epsilons, n)."""
    problems = []
    if header.body_sha256 != rel.message_sha256 or header.release_id != rel.id:
        problems.append(f"release {rel.id}: message header disagrees with the release")
    if header.epsilon1 != rel.epsilon1 or header.epsilon2 != rel.epsilon2 or header.n != rel.n:
        problems.append(f"release {rel.id}: message header epsilons or n disagree")
    return problems


def _check_external_header(rel: Any) -> list[str]:
    """An externally stored release: its kept header.json hashes as recorded and agrees."""
    from pydantic import ValidationError

    from shared.message import MessageHeader

    text = (rel.external_header or "").encode("utf-8")
    if hashlib.sha256(text).hexdigest() != rel.binary_sha256 or len(text) != rel.binary_size:
        return [f"release {rel.id}: kept header does not match its recorded sha256"]
    try:
        header = MessageHeader.model_validate_json(text)
    except ValidationError:
        return [f"release {rel.id}: kept header is invalid"]
    return _header_problems(header, rel)


def export_csv(conn: Connection, out: TextIO) -> int:
    """Write every entry as CSV (header row first); returns the number of entries."""
    return write_csv((public_entry(entry) for entry in _iter_ledger(conn)), out)


def export_csv_text(conn: Connection) -> str:
    buffer = io.StringIO()
    export_csv(conn, buffer)
    return buffer.getvalue()


# ---- audit views (the console, GET /v1/ledger filters and CSV, GET /v1/ledger/verify) -------


def select_entries(
    conn: Connection,
    *,
    dataset: str | None = None,
    release_id: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    until: str | None = None,
    after: int = 0,
    limit: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Entries in chain order matching every filter given (``since`` <= time < ``until``).

    ``since`` / ``until`` are stored-format times (``datasets.utc_now``), compared as text, which
    orders them correctly because every stored time has the same fixed-width UTC format.
    """
    query = select(ledger).where(ledger.c.seq > after).order_by(ledger.c.seq)
    conditions = {
        ledger.c.dataset: dataset,
        ledger.c.release_id: release_id,
        ledger.c.kind: kind,
    }
    for column, value in conditions.items():
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(ledger.c.time >= since)
    if until is not None:
        query = query.where(ledger.c.time < until)
    if limit is not None:
        query = query.limit(limit)
    for row in conn.execute(query):
        yield dict(row._mapping)


def write_csv(public_entries: Iterable[dict[str, Any]], out: TextIO, *, header: bool = True) -> int:
    """Write entries as the API returns them (:func:`public_entry`) as CSV; returns the count.

    Amounts are written as given (no float formatting of their own), ``parameters`` as canonical
    JSON; the ``delta`` and ``actor`` columns are empty for entries without one.
    """
    writer = csv.writer(out, lineterminator="\n")
    if header:
        writer.writerow(CSV_COLUMNS)
    count = 0
    for entry in public_entries:
        row = []
        for key in CSV_COLUMNS:
            value = entry.get(key)
            if key == "parameters":
                value = canonical_json(value)
            row.append("" if value is None else str(value))
        writer.writerow(row)
        count += 1
    return count


@dataclass(frozen=True, kw_only=True)
class ChainBreak:
    """The first entry at which the hash chain breaks, and how."""

    seq: int
    reason: str


def first_break(conn: Connection) -> ChainBreak | None:
    """The first entry whose seq, ``prev_hash`` or ``entry_hash`` breaks the chain, if any.

    The same three link checks :func:`verify` makes, stopping at the first failure: an edited
    entry fails its own ``entry_hash``; a deleted or reordered one the next entry's seq or
    ``prev_hash``.
    """
    prev, expected_seq = GENESIS_HASH, 1
    for entry in _iter_ledger(conn):
        seq = entry["seq"]
        if seq != expected_seq:
            return ChainBreak(seq=seq, reason=f"expected seq {expected_seq} (gap or reorder)")
        if entry["prev_hash"] != prev:
            return ChainBreak(seq=seq, reason="prev_hash does not match the previous entry")
        if entry_hash(entry) != entry["entry_hash"]:
            return ChainBreak(seq=seq, reason="entry_hash does not match its content")
        prev, expected_seq = entry["entry_hash"], seq + 1
    return None
