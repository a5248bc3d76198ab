"""The tables (SQLAlchemy Core: bulk paths use the raw DBAPI cursor, never one object per row).

``entries`` holds the publisher's registrations and the advertiser's labels in one row per
(dataset, example id), so a release reads its whole universe in one ordered scan. Messages are
stored as ordered chunks of the binary encoding so a download streams from the database.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from shared.message import SECTION_HEAD, SECTION_IDS, SECTION_LABELS

metadata = MetaData()

datasets = Table(
    "datasets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("label_min", Double, nullable=False),
    Column("label_max", Double, nullable=False),
    Column("default_label", Double, nullable=False),
    Column("epsilon_budget", Double, nullable=False),
    Column("epsilon_spent", Double, nullable=False, default=0.0),
    # The exact decimal amounts (labels_party.budget.accountant); NULL in databases written before
    # them, where the float above is read at its exact binary value.
    Column("epsilon_budget_exact", Text, nullable=True),
    Column("epsilon_spent_exact", Text, nullable=True),
    # The delta budget of (epsilon, delta) model releases and what they spent (exact decimal
    # text); NULL means 0: no delta may be spent (datasets created before deltas).
    Column("delta_budget_exact", Text, nullable=True),
    Column("delta_spent_exact", Text, nullable=True),
    Column("state", String(16), nullable=False, default="open"),
    Column("n_examples", BigInteger, nullable=False, default=0),
    Column("n_labels", BigInteger, nullable=False, default=0),
    # Bumped by every ingest; a release stores only if the labels it randomized are current.
    Column("data_version", BigInteger, nullable=False, default=0),
    Column("created", String(40), nullable=False),
    # The public attribute examples are segmented by (``shared.segments``); NULL: none.
    Column("segment_column", String(64), nullable=True),
    # shared.message.universe_digest of the ids its first external (Spark) release covered,
    # for a dataset without registered examples; later external releases must match it.
    Column("universe_sha256", String(64), nullable=True),
    UniqueConstraint("name", name="uq_datasets_name"),
)

entries = Table(
    "entries",
    metadata,
    Column("dataset_id", Integer, ForeignKey("datasets.id"), nullable=False),
    Column("example_id", String(128), nullable=False),
    Column("registered", SmallInteger, nullable=False),  # 1 once the publisher registered it
    Column("value", Double, nullable=True),  # the clipped label; NULL if never labelled
    # The example's public segment, fixed at registration (segmented datasets only).
    Column("segment", String(64), nullable=True),
    PrimaryKeyConstraint("dataset_id", "example_id", name="pk_entries"),
    sqlite_with_rowid=False,
)

releases = Table(
    "releases",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("dataset_id", Integer, ForeignKey("datasets.id"), nullable=False),
    Column("requested_mechanism", String(32), nullable=False),
    Column("mechanism", String(32), nullable=False),
    Column("params", Text, nullable=False),  # canonical JSON of every public parameter
    Column("epsilon1", Double, nullable=False),
    Column("epsilon2", Double, nullable=False),
    Column("epsilon", Double, nullable=False),
    # The exact charges (decimal text; NULL before exact amounts): epsilon1 + epsilon2 = epsilon.
    Column("epsilon1_exact", Text, nullable=True),
    Column("epsilon2_exact", Text, nullable=True),
    Column("epsilon_exact", Text, nullable=True),
    Column("n", BigInteger, nullable=False),
    Column("created", String(40), nullable=False),
    Column("message_sha256", String(64), nullable=False),  # header.body_sha256
    Column("binary_sha256", String(64), nullable=False),  # sha256 of the whole binary message
    Column("binary_size", BigInteger, nullable=False),
    Column("expected_label_mse", Double, nullable=True),
    Column("actor_role", String(16), nullable=False),
    Column("actor", String(64), nullable=True),  # the principal (NULL: role-only token)
    # NULL: the message is stored here (message_chunks). "external": a release executed outside
    # the service (the Spark job, ``labels_party.releasing.external_releases``): only its header is
    # kept, and binary_sha256 / binary_size are those of that header.json.
    Column("storage", String(16), nullable=True),
    Column("external_header", Text, nullable=True),
    # An external release charged BEFORE its noise was drawn
    # (labels_party.releasing.external_releases): "charged" (paid, nothing published yet),
    # "released" (its header recorded) or "failed" (the job gave up: the charge stays). NULL: a
    # release recorded in one step (the service's, or an external one of an older job). Until
    # "released", mechanism is the requested one, params "{}" and the sha256 / size columns are
    # empty.
    Column("state", String(16), nullable=True),
    Column("external_request", Text, nullable=True),  # canonical JSON of what was charged
)

# part: the section of the binary message a chunk belongs to (``shared.message``): magic +
# header, u64 ids length + ids, float64 labels (8-byte aligned chunks)
PART_HEAD, PART_IDS, PART_LABELS = SECTION_HEAD, SECTION_IDS, SECTION_LABELS

message_chunks = Table(
    "message_chunks",
    metadata,
    Column("release_id", String(40), ForeignKey("releases.id"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("part", SmallInteger, nullable=False),
    Column("size", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    PrimaryKeyConstraint("release_id", "seq", name="pk_message_chunks"),
)

ledger = Table(
    "ledger",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("time", String(40), nullable=False),
    Column("dataset", String(64), nullable=False),
    Column("release_id", String(40), ForeignKey("releases.id"), nullable=True),
    Column("kind", String(16), nullable=False),  # dataset | histogram | randomizer | model
    Column("mechanism", String(32), nullable=True),
    Column("epsilon", Double, nullable=False),
    # The exact amount (decimal text) and delta of an (epsilon, delta) spend; NULL in entries
    # written before exact amounts (hashed with the float, as they were).
    Column("epsilon_exact", Text, nullable=True),
    Column("delta_exact", Text, nullable=True),
    Column("actor_role", String(16), nullable=False),
    # The principal (labels_party.access.principals) whose token acted; NULL for a role-only token
    # or an entry written before principals. Hashed only when set (older entries as they were).
    Column("actor", String(64), nullable=True),
    Column("parameters", Text, nullable=False),  # canonical JSON
    Column("message_sha256", String(64), nullable=True),
    Column("prev_hash", String(64), nullable=False),
    Column("entry_hash", String(64), nullable=False),
)

# Release receipts (labels_party.releasing.receipts): the Ed25519 public keys that ever signed one
# (the private key is a 0600 file, never in the database) and each release's signed receipt.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("key_id", String(32), primary_key=True),
    Column("algorithm", String(16), nullable=False),
    Column("public_key", Text, nullable=False),  # base64 of the raw 32-byte key
    Column("created", String(40), nullable=False),
    Column("retired", String(40), nullable=True),  # NULL for the key that signs now
)

# Secrets of this database (labels_party.releasing.external_releases): the key that turns an
# external release's labels input digest into the keyed one the ledger keeps (migration 0013).
instance_secrets = Table(
    "instance_secrets",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("value", LargeBinary, nullable=False),
)

receipts = Table(
    "receipts",
    metadata,
    Column("release_id", String(40), ForeignKey("releases.id"), primary_key=True),
    Column("key_id", String(32), nullable=False),
    Column("receipt", Text, nullable=False),  # the signed receipt as canonical JSON
    Column("signed_at", String(40), nullable=False),
)

# Operator trails (labels_party.budget.trails): releases refused or failed after the request was
# accepted (the request's public fields and the error text the caller got), and every message
# download (who, which release, when, which encoding, how many bytes went out).
release_audit = Table(
    "release_audit",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("time", String(40), nullable=False),
    Column("actor_role", String(16), nullable=False),
    Column("actor", String(64), nullable=True),  # the principal (NULL: role-only token)
    Column("dataset", String(200), nullable=False),
    Column("request", Text, nullable=False),  # canonical JSON of the request's public fields
    Column("status", Integer, nullable=False),  # the HTTP status the caller got
    Column("error_class", String(64), nullable=False),
    Column("detail", Text, nullable=False),  # the error text the caller got
    Column("errors", Text, nullable=False),  # JSON [{field, message}] the caller got
)

access_log = Table(
    "access_log",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("time", String(40), nullable=False),
    Column("actor_role", String(16), nullable=False),
    Column("actor", String(64), nullable=True),  # the principal (NULL: role-only token)
    Column("release_id", String(40), nullable=False),
    Column("encoding", String(64), nullable=False),
    Column("bytes", BigInteger, nullable=True),  # NULL until the download completed
    Column("completed", SmallInteger, nullable=False),
)

# Named principals (labels_party.access.principals): a person or an integration, its role, and the
# sha256 of its bearer token (the token itself is shown once, at issue, and never stored).
principals = Table(
    "principals",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("role", String(16), nullable=False),
    Column("token_sha256", String(64), nullable=False, unique=True),
    Column("created", String(40), nullable=False),
    Column("revoked", String(40), nullable=True),
)

# Public features the publisher uploads for model releases (labels_party.releasing.model_releases):
# the chosen numeric columns, one float64 row per example id (ids newline-joined, the matrix as
# little-endian float64 bytes, row-major), and the sha256 that a model message names.
public_feature_sets = Table(
    "public_feature_sets",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("dataset_id", Integer, ForeignKey("datasets.id"), nullable=False),
    Column("columns", Text, nullable=False),  # JSON list of column names
    Column("n", BigInteger, nullable=False),
    Column("ids", Text, nullable=False),
    Column("matrix", LargeBinary, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("created", String(40), nullable=False),
    Column("actor_role", String(16), nullable=False),
)

# Released models: the stored message (canonical JSON), charged by one ``model`` ledger entry
# (its parameters name the model release id; ``ledger.release_id`` is for label releases).
model_releases = Table(
    "model_releases",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("dataset_id", Integer, ForeignKey("datasets.id"), nullable=False),
    Column("features_id", String(40), ForeignKey("public_feature_sets.id"), nullable=False),
    Column("estimator", String(16), nullable=False),
    Column("privacy", String(16), nullable=False),
    Column("epsilon_exact", Text, nullable=False),
    Column("delta_exact", Text, nullable=True),
    Column("message", Text, nullable=False),
    Column("message_sha256", String(64), nullable=False),  # header.body_sha256
    Column("created", String(40), nullable=False),
    Column("actor_role", String(16), nullable=False),
    Column("actor", String(64), nullable=True),  # the principal (NULL: role-only token)
)

# Each model release's signed receipt (labels_party.releasing.receipts), as ``receipts`` for label
# releases.
model_receipts = Table(
    "model_receipts",
    metadata,
    Column("model_release_id", String(40), ForeignKey("model_releases.id"), primary_key=True),
    Column("key_id", String(32), nullable=False),
    Column("receipt", Text, nullable=False),  # the signed receipt as canonical JSON
    Column("signed_at", String(40), nullable=False),
)

# A spending (or budget-raising) request's ``Idempotency-Key`` (labels_party.budget.idempotency),
# stored in the write transaction that spends: a repeat gets ``answer`` again and spends nothing.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("dataset_id", Integer, ForeignKey("datasets.id"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("kind", String(16), nullable=False),  # release | model | top_up
    Column("request_sha256", String(64), nullable=False),  # of the request's public form
    Column("made", String(40), nullable=False),  # the release, model release or ledger entry
    Column("answer", Text, nullable=False),  # canonical JSON of the first answer (no message)
    Column("created", String(40), nullable=False),
)
