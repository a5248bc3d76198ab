"""The ONE privatized message the labels party sends: a versioned header and a body.

The header carries every public parameter the features party needs to validate the message and to
post-process (debias) the noisy labels: mechanism and parameters, epsilon1 and epsilon2, the label
bounds, the noisy histogram, the DP label mean, n, and the sha256 of the body. The body is the
example ids with their noisy labels, never anything else. Two encodings carry the same content and
the same ``body_sha256``: JSON (small releases) and a compact length-prefixed binary layout that is
produced and consumed in chunks (millions of labels).

Binary layout (all integers little-endian)::

    b"LDPM" | u16 format_version | u32 header_len | header JSON (utf-8)
    | u64 ids_len | ids joined by "\\n" (utf-8) | n x float64 noisy labels
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import struct
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.errors import IntegrityError
from shared.mechanisms import registry

if TYPE_CHECKING:
    from shared.mechanisms.histogram import Prior
    from shared.randomizer import Release
    from shared.segments import SegmentedRelease

# Version 2 adds the optional header field ``model_dim``, version 3 the optional DP label mean
# (``label_mean``, ``label_mean_epsilon``), version 4 the derived public values the receiver
# uses (``label_mean_variance``, ``recommended_transform``), version 5 the public segment groups
# of a segmented release (``segments``; only segmented messages carry version 5, the others are
# still written as version 4); older messages are still read.
FORMAT_VERSION = 4
SEGMENTED_FORMAT_VERSION = 5
SUPPORTED_FORMAT_VERSIONS = (1, 2, 3, 4, 5)
JSON_MEDIA_TYPE = "application/json"
BINARY_MEDIA_TYPE = "application/vnd.labeldp.message+binary"

MAGIC = b"LDPM"
_PREFIX = struct.Struct("<4sHI")
_U64 = struct.Struct("<Q")
_BODY_DOMAIN = b"labeldp-body-v1\n"

EXAMPLE_ID_MAX_LENGTH = 128
EXAMPLE_ID_PATTERN = rf"^[A-Za-z0-9_.:\-]{{1,{EXAMPLE_ID_MAX_LENGTH}}}$"  # with fullmatch only
# An example id as a request field (pydantic): the same rule, a 422 naming the field.
ExampleId = Annotated[
    str, Field(pattern=EXAMPLE_ID_PATTERN, min_length=1, max_length=EXAMPLE_ID_MAX_LENGTH)
]
_EXAMPLE_ID_RE = re.compile(EXAMPLE_ID_PATTERN)

# "none" (an un-randomized benchmark message) or a registered mechanism
# (``shared.mechanisms.registry``), checked when the header is read; "segmented" for a message
# whose randomizers are its groups' (``MessageHeader.segments``).
NO_MECHANISM = "none"
SEGMENTED = "segmented"
ParamValue = float | int | str | bool | list[float] | None


def check_example_id(example_id: str) -> str:
    """Example ids are 1-128 characters of ``[A-Za-z0-9_.:-]`` (never a newline or comma)."""
    if not isinstance(example_id, str) or not _EXAMPLE_ID_RE.fullmatch(example_id):
        raise ValueError(
            f"example_id {example_id!r} must be 1-128 characters of letters, digits, '_.:-'"
        )
    return example_id


class NoisyHistogram(BaseModel):
    """The epsilon1-DP prior as published: k + 1 edges and k probabilities."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    edges: list[float]
    probs: list[float]

    @model_validator(mode="after")
    def _shape(self) -> NoisyHistogram:
        if len(self.edges) != len(self.probs) + 1 or not self.probs:
            raise ValueError("histogram needs k >= 1 probs and k + 1 edges")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError("histogram edges must be strictly increasing")
        if any(p < 0 or not math.isfinite(p) for p in self.probs):
            raise ValueError("histogram probs must be finite and >= 0")
        return self

    def prior(self) -> Prior:
        """The histogram as the engine's :class:`~shared.mechanisms.histogram.Prior`."""
        from shared.mechanisms.histogram import Prior

        return Prior(edges=np.asarray(self.edges), probs=np.asarray(self.probs))


class MessagePart(BaseModel):
    """One randomizer's share of a message: its examples' count and every public value needed
    to post-process their noisy labels. A segmented message has one per group (in body order),
    any other message one, read from its top-level fields (:meth:`MessageHeader.parts`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    segments: list[str] = Field(default_factory=list)  # empty: the whole message
    pooled: bool = False  # True: the small segments merged into one group
    n: int = Field(ge=0)
    mechanism: str
    params: dict[str, ParamValue]
    histogram: NoisyHistogram
    model_dim: int | None = Field(default=None, ge=1, le=10**9, strict=True)
    label_mean: float | None = None
    label_mean_epsilon: float | None = Field(default=None, gt=0)
    label_mean_variance: float | None = Field(default=None, ge=0)
    recommended_transform: Literal["raw", "debiased"] | None = None

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, name: str) -> str:
        if name != NO_MECHANISM and name not in registry.names():
            raise ValueError(f"mechanism {name!r} is not a registered mechanism")
        return name

    @property
    def prior(self) -> Prior:
        """The part's epsilon1-DP histogram as the engine's prior."""
        return self.histogram.prior()


class MessageSegments(BaseModel):
    """A segmented release's public groups (``shared.segments``), in the body's order: the
    first ``groups[0].n`` examples of the body are group 0's, and so on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    column: str = Field(min_length=1, max_length=64)
    groups: list[MessagePart] = Field(min_length=2)

    @model_validator(mode="after")
    def _disjoint(self) -> MessageSegments:
        seen: set[str] = set()
        for group in self.groups:
            if not group.segments:
                raise ValueError("every group names its segments")
            if seen & set(group.segments) or len(set(group.segments)) != len(group.segments):
                raise ValueError("a segment belongs to exactly one group")
            seen |= set(group.segments)
        return self


# A label release's id: "rel_" and 24 hex digits (the labels party's, or a Spark job's).
RELEASE_ID_PATTERN = r"^rel_[0-9a-f]{24}$"


def new_release_id() -> str:
    """A fresh release id from the OS CSPRNG (unguessable: it names a message)."""
    return "rel_" + secrets.token_hex(12)


class MessageHeader(BaseModel):
    """Everything public about one release; the features party trusts nothing else."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    release_id: str
    dataset: str
    created: datetime
    mechanism: str
    params: dict[str, ParamValue]
    epsilon1: float = Field(gt=0)
    epsilon2: float = Field(gt=0)
    label_min: float
    label_max: float
    default_label: float
    histogram: NoisyHistogram | None  # None only in a segmented message (see segments)
    n: int = Field(ge=0)
    body_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # The model dimension d the labels party's choice of randomizer assumed (C = bias^2 +
    # (d / n) Var, ``shared.selection``); the features party resolves its label transform with
    # the same d, because the randomizer's parameters were tuned for it. None: not recorded.
    model_dim: int | None = Field(default=None, ge=1, le=10**9, strict=True)
    # The label_mean_epsilon-DP mean of the clipped labels (``shared.mechanisms.private_mean``),
    # bought with part of epsilon1 (the histogram got the rest): the features party anchors its
    # predictions on it. None: the release spent nothing on it.
    label_mean: float | None = None
    label_mean_epsilon: float | None = Field(default=None, gt=0)
    # Derived public values the labels party computed and the features party uses as they are
    # (None in older messages: the receiver derives them from the fields above).
    # The DP mean's noise variance (``private_mean.private_mean_variance``).
    label_mean_variance: float | None = Field(default=None, ge=0)
    # "raw" or "debiased": the training target with the lower C = bias^2 + (model_dim / n) Var
    # under the noisy prior (``shared.selection.recommended_transform``).
    recommended_transform: Literal["raw", "debiased"] | None = None
    # A segmented release (format 5; ``shared.segments``): its groups, each with its own
    # randomizer, prior and DP mean. Then ``mechanism`` is "segmented", ``params`` is empty,
    # ``histogram`` is None and ``label_mean`` (if any) is the groups' pooled mean: read
    # :meth:`parts`, never the top-level randomizer fields.
    segments: MessageSegments | None = None

    @field_validator("mechanism")
    @classmethod
    def _mechanism(cls, name: str) -> str:
        if name not in (NO_MECHANISM, SEGMENTED) and name not in registry.names():
            raise ValueError(f"mechanism {name!r} is not a registered mechanism")
        return name

    @model_validator(mode="after")
    def _segments(self) -> MessageHeader:
        if self.segments is None:
            if self.mechanism == SEGMENTED or self.histogram is None:
                raise ValueError("only a segmented message (with segments) has no histogram")
            return self
        if self.format_version < SEGMENTED_FORMAT_VERSION:
            raise ValueError(f"segments need format_version {SEGMENTED_FORMAT_VERSION}")
        if self.mechanism != SEGMENTED or self.params or self.histogram is not None:
            raise ValueError(
                "a segmented message has mechanism 'segmented', empty params and no histogram"
            )
        if sum(group.n for group in self.segments.groups) != self.n:
            raise ValueError("the groups' n must add up to the message's n")
        return self

    def parts(self) -> list[MessagePart]:
        """The message's randomizers in body order: one per group, or the whole message."""
        if self.segments is not None:
            return list(self.segments.groups)
        assert self.histogram is not None  # checked by the validator
        return [
            MessagePart(
                n=self.n,
                mechanism=self.mechanism,
                params=self.params,
                histogram=self.histogram,
                model_dim=self.model_dim,
                label_mean=self.label_mean,
                label_mean_epsilon=self.label_mean_epsilon,
                label_mean_variance=self.label_mean_variance,
                recommended_transform=self.recommended_transform,
            )
        ]

    @model_validator(mode="after")
    def _label_mean(self) -> MessageHeader:
        if (self.label_mean is None) != (self.label_mean_epsilon is None):
            raise ValueError("label_mean and label_mean_epsilon go together")
        if self.label_mean is not None and self.label_mean_epsilon is not None:
            if not self.label_min <= self.label_mean <= self.label_max:
                raise ValueError("label_mean must lie within [label_min, label_max]")
            if not self.label_mean_epsilon < self.epsilon1:
                raise ValueError("label_mean_epsilon must be < epsilon1 (it is part of it)")
        if self.label_mean_variance is not None and self.label_mean is None:
            raise ValueError("label_mean_variance needs label_mean")
        return self

    @property
    def epsilon(self) -> float:
        """Total privacy cost of the message (basic composition)."""
        return self.epsilon1 + self.epsilon2

    @property
    def prior(self) -> Prior:
        """The epsilon1-DP histogram as the engine's prior (not for a segmented message)."""
        if self.histogram is None:
            raise ValueError("a segmented message has one prior per group: read parts()")
        return self.histogram.prior()


def json_safe(value: Any) -> Any:
    """JSON-ready: numpy scalars and arrays as Python numbers and lists, mapping keys as text."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, np.generic):
        return value.item()
    return value


def header_for(
    release: Release | SegmentedRelease,
    *,
    release_id: str,
    dataset: str,
    default_label: float,
    n: int,
    body_sha256: str,
    created: datetime,
) -> MessageHeader:
    """The header of ``release``: the one place a release's public values become the message's
    (the labels-party service and the Spark job both write it through here).

    A segmented release (``shared.segments``) gets format 5: one part per group, and as its
    top-level DP mean the groups' means pooled by size, sum(n_g m_g) / n (post-processing;
    label_mean_epsilon-DP by the same parallel composition), with variance sum((n_g / n)^2 V_g).
    """
    from shared.segments import SegmentedRelease as Segmented

    common: dict[str, Any] = {
        "release_id": release_id,
        "dataset": dataset,
        "created": created,
        "default_label": default_label,
        "n": n,
        "body_sha256": body_sha256,
    }
    if not isinstance(release, Segmented):
        part = _part_of(release, n=n)
        return MessageHeader(
            **common,
            epsilon1=release.epsilon1,
            epsilon2=release.epsilon2,
            label_min=release.plan.lo,
            label_max=release.plan.hi,
            **part.model_dump(exclude={"segments", "pooled", "n"}),
        )
    groups = [
        _part_of(one, n=group.n).model_copy(
            update={"segments": list(group.segments), "pooled": group.pooled}
        )
        for one, group in zip(release.releases, release.plan.groups, strict=True)
    ]
    first = release.releases[0]
    mean = variance = None
    if all(group.label_mean is not None for group in groups) and n > 0:
        mean = sum(g.n * g.label_mean for g in groups) / n  # type: ignore[operator]
        mean = min(max(mean, first.plan.lo), first.plan.hi)
        variance = sum((g.n / n) ** 2 * (g.label_mean_variance or 0.0) for g in groups)
    return MessageHeader(
        **common,
        format_version=SEGMENTED_FORMAT_VERSION,
        mechanism=SEGMENTED,
        params={},
        epsilon1=first.epsilon1,
        epsilon2=first.epsilon2,
        label_min=first.plan.lo,
        label_max=first.plan.hi,
        histogram=None,
        model_dim=first.model_dim,
        label_mean=mean,
        label_mean_epsilon=first.plan.label_mean_float if mean is not None else None,
        label_mean_variance=variance,
        segments=MessageSegments(column=release.plan.column, groups=groups),
    )


def _part_of(release: Release, *, n: int) -> MessagePart:
    """The public values of one randomizer's release."""
    return MessagePart(
        n=n,
        mechanism=release.mechanism,
        params=json_safe(release.params),
        histogram=NoisyHistogram(**json_safe(release.prior.to_dict())),
        model_dim=release.model_dim,
        label_mean=release.label_mean,
        label_mean_epsilon=release.plan.label_mean_float,
        label_mean_variance=release.plan.label_mean_variance,
        recommended_transform=release.recommended_transform,  # type: ignore[arg-type]
    )


class MessageBody(BaseModel):
    """Example ids with their noisy labels, in the same order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    example_ids: list[str]
    noisy_labels: list[float]

    @field_validator("example_ids")
    @classmethod
    def _ids(cls, ids: list[str]) -> list[str]:
        for example_id in ids:
            check_example_id(example_id)
        return ids

    @model_validator(mode="after")
    def _aligned(self) -> MessageBody:
        if len(self.example_ids) != len(self.noisy_labels):
            raise ValueError("example_ids and noisy_labels must have the same length")
        return self


class LabelMessage(BaseModel):
    """The whole message, as served in JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header: MessageHeader
    body: MessageBody


def body_sha256(example_ids: Sequence[str], noisy_labels: np.ndarray) -> str:
    """The digest both encodings carry: ids joined by newlines, then little-endian float64s."""
    return body_digest(["\n".join(example_ids).encode("utf-8")], [noisy_labels])


def body_digest(id_chunks: Iterable[bytes], label_chunks: Iterable[np.ndarray]) -> str:
    """:func:`body_sha256`, streamed (:class:`BodyDigest`): ids in consecutive pieces, then the
    labels in pieces. For the Parquet message, whose body is read batch by batch."""
    digest = BodyDigest()
    for piece in id_chunks:
        digest.update(piece)
    for labels in label_chunks:
        digest.labels(labels)
    return digest.hexdigest()


class IdsDigest:
    """sha256 under a domain tag of ids in ascending order joined by "\n", fed in consecutive
    pieces (each piece some ids joined by "\n", empty pieces skipped; any bytes-like object)."""

    def __init__(self, domain: bytes) -> None:
        self._digest = hashlib.sha256(domain)
        self._first = True

    def update(self, piece: bytes | memoryview) -> None:
        if not len(piece):
            return
        if not self._first:
            self._digest.update(b"\n")
        self._digest.update(piece)
        self._first = False

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


class BodyDigest(IdsDigest):
    """:func:`body_sha256` fed in pieces: every id piece (:meth:`update`), then the noisy labels
    in pieces (:meth:`labels`: little-endian float64s after one "\n")."""

    def __init__(self) -> None:
        super().__init__(_BODY_DOMAIN)
        self._in_labels = False

    def update(self, piece: bytes | memoryview) -> None:
        if self._in_labels:
            raise ValueError("every id piece comes before the labels")
        super().update(piece)

    def labels(self, values: np.ndarray) -> None:
        if not self._in_labels:
            self._digest.update(b"\n")
            self._in_labels = True
        self._digest.update(np.ascontiguousarray(values, dtype="<f8").tobytes())

    def hexdigest(self) -> str:
        if self._in_labels:
            return self._digest.hexdigest()
        digest = self._digest.copy()
        digest.update(b"\n")  # no label piece came: the separator alone
        return digest.hexdigest()


class UniverseDigest(IdsDigest):
    """sha256 of a release's example-id universe: its ids in ascending order joined by "\n",
    under its own domain tag, fed as :class:`IdsDigest`. What binds an external (Spark) release
    to its dataset's universe (``labels_party.releasing.external_releases``)."""

    def __init__(self) -> None:
        super().__init__(b"labeldp-universe-v1\n")


def universe_digest(id_chunks: Iterable[bytes]) -> str:
    """:class:`UniverseDigest` of the pieces ``id_chunks``."""
    digest = UniverseDigest()
    for piece in id_chunks:
        digest.update(piece)
    return digest.hexdigest()


# The sections of the binary encoding, as :func:`encode_sections` tags its pieces.
SECTION_HEAD, SECTION_IDS, SECTION_LABELS = 0, 1, 2


def encode_sections(
    header: MessageHeader,
    example_ids: Sequence[str],
    noisy_labels: np.ndarray,
    *,
    chunk: int = 1 << 20,
) -> Iterator[tuple[int, bytes]]:
    """The binary encoding in pieces of about ``chunk`` bytes, each tagged with its section.

    HEAD: prefix + header JSON; IDS: the u64 length, then the joined ids; LABELS: float64s
    (pieces of whole labels). Concatenated, the pieces are :func:`encode_binary`'s bytes.
    """
    ids_bytes = "\n".join(example_ids).encode("utf-8")
    yield _head_section(header)
    yield SECTION_IDS, _U64.pack(len(ids_bytes))
    for start in range(0, len(ids_bytes), chunk):
        yield SECTION_IDS, ids_bytes[start : start + chunk]
    yield from _label_sections(noisy_labels, chunk)


def encode_sections_of_pieces(
    header: MessageHeader,
    id_pieces: Sequence[bytes],
    noisy_labels: np.ndarray,
    *,
    chunk: int = 1 << 20,
) -> Iterator[tuple[int, bytes]]:
    """:func:`encode_sections` of ids given as consecutive pieces, never joined in memory.

    Each piece is some consecutive ids joined by "\n" (UTF-8; empty pieces skipped), the
    pieces joined by "\n" too, as :func:`body_digest` reads them. Yields the same sections of
    the same bytes as :func:`encode_sections` of those ids: the same chunk boundaries, one
    chunk (about ``chunk`` bytes) built at a time.
    """
    pieces = [piece for piece in id_pieces if piece]
    yield _head_section(header)
    yield SECTION_IDS, _U64.pack(sum(map(len, pieces)) + max(len(pieces) - 1, 0))
    buffer = bytearray()
    for part in _separated(pieces):
        view = memoryview(part)
        while view:
            take = chunk - len(buffer)
            buffer += view[:take]
            view = view[take:]
            if len(buffer) == chunk:
                yield SECTION_IDS, bytes(buffer)
                buffer.clear()
    if buffer:
        yield SECTION_IDS, bytes(buffer)
    yield from _label_sections(noisy_labels, chunk)


def _separated(pieces: list[bytes]) -> Iterator[bytes]:
    """The pieces with a "\n" between each two (none joined: no copy)."""
    for index, piece in enumerate(pieces):
        if index:
            yield b"\n"
        yield piece


def _head_section(header: MessageHeader) -> tuple[int, bytes]:
    """The HEAD section: magic, format version, header length, header JSON."""
    header_bytes = header.model_dump_json().encode("utf-8")
    return SECTION_HEAD, _PREFIX.pack(
        MAGIC, header.format_version, len(header_bytes)
    ) + header_bytes


def _label_sections(noisy_labels: np.ndarray, chunk: int) -> Iterator[tuple[int, bytes]]:
    """The LABELS sections: little-endian float64s, ``chunk // 8`` labels a piece."""
    labels = np.ascontiguousarray(noisy_labels, dtype="<f8")
    per_chunk = max(chunk // 8, 1)
    for start in range(0, labels.size, per_chunk):
        yield SECTION_LABELS, labels[start : start + per_chunk].tobytes()


def encode_binary(
    header: MessageHeader,
    example_ids: Sequence[str],
    noisy_labels: np.ndarray,
    *,
    chunk: int = 1 << 20,
) -> Iterator[bytes]:
    """Yield the binary encoding in pieces of about ``chunk`` bytes (for streaming responses)."""
    for _section, data in encode_sections(header, example_ids, noisy_labels, chunk=chunk):
        yield data


def json_from_sections(sections: Iterable[tuple[int, bytes]]) -> Iterator[bytes]:
    """The :class:`LabelMessage` JSON of a binary encoding given as tagged sections, streamed.

    Deterministic (the header's own JSON, shortest round-trip floats), so a message stored once
    renders to the same bytes on every pull.
    """
    ids_started = labels_started = False
    carry = b""
    skip_length = True
    for section, data in sections:
        if section == SECTION_HEAD:
            _magic, _version, header_len = _PREFIX.unpack_from(data, 0)
            header_json = data[_PREFIX.size : _PREFIX.size + header_len]
            yield b'{"header":' + header_json + b',"body":{"example_ids":['
        elif section == SECTION_IDS:
            if skip_length:
                data, skip_length = data[_U64.size :], False
            buffer = carry + data
            cut = buffer.rfind(b"\n")
            if cut < 0:
                carry = buffer
                continue
            complete, carry = buffer[:cut], buffer[cut + 1 :]
            yield (b"," if ids_started else b"") + b'"' + complete.replace(b"\n", b'","') + b'"'
            ids_started = True
        else:
            if not labels_started:
                if carry or not ids_started:
                    yield (b"," if ids_started else b"") + b'"' + carry + b'"'
                    carry = b""
                yield b'],"noisy_labels":['
            values = np.frombuffer(data, dtype="<f8").tolist()
            text = ",".join(map(repr, values)).encode("ascii")
            yield (b"," if labels_started else b"") + text
            labels_started = True
    if not labels_started:  # n = 0: keep the JSON valid
        yield b'],"noisy_labels":['
    yield b"]}}"


def decode_binary(data: bytes | memoryview) -> tuple[MessageHeader, list[str], np.ndarray]:
    """Parse the binary encoding and verify it (raises :class:`IntegrityError`)."""
    view = memoryview(data)
    header, offset = _decode_prefix_and_header(view)
    if len(view) < offset + _U64.size:
        raise IntegrityError("message is truncated (no ids length)")
    (ids_len,) = _U64.unpack_from(view, offset)
    offset += _U64.size
    ids_text = bytes(view[offset : offset + ids_len]).decode("utf-8")
    offset += ids_len
    example_ids = ids_text.split("\n") if ids_len else []
    expected = offset + 8 * header.n
    if len(view) != expected:
        raise IntegrityError(
            f"message body has {len(view) - offset} label bytes, expected {8 * header.n}"
        )
    labels = np.frombuffer(view[offset:expected], dtype="<f8").astype(np.float64)
    verify(header, example_ids, labels)
    return header, example_ids, labels


def verify(header: MessageHeader, example_ids: Sequence[str], noisy_labels: np.ndarray) -> None:
    """Check version, lengths, finiteness and the body sha256; raise :class:`IntegrityError`."""
    if header.format_version not in SUPPORTED_FORMAT_VERSIONS:
        raise IntegrityError(f"unsupported message format_version {header.format_version}")
    if len(example_ids) != header.n or len(noisy_labels) != header.n:
        raise IntegrityError(
            f"header says n={header.n}, body has {len(example_ids)} ids, {len(noisy_labels)} labels"
        )
    if not np.all(np.isfinite(noisy_labels)):
        raise IntegrityError("message contains non-finite labels")
    if body_sha256(example_ids, noisy_labels) != header.body_sha256:
        raise IntegrityError("message body does not match its sha256")


def to_json_message(
    header: MessageHeader, example_ids: Sequence[str], noisy_labels: np.ndarray
) -> LabelMessage:
    """The JSON form of the same content."""
    body = MessageBody(
        example_ids=list(example_ids), noisy_labels=np.asarray(noisy_labels).tolist()
    )
    return LabelMessage(header=header, body=body)


ModelT = TypeVar("ModelT", bound=BaseModel)


def validated(model: type[ModelT], message: Any, *, what: str) -> ModelT:
    """``message`` (JSON text, a dict or already a ``model``) as a ``model``, else
    :class:`IntegrityError` naming ``what``."""
    if isinstance(message, model):
        return message
    try:
        if isinstance(message, bytes | str):
            return model.model_validate_json(message)
        return model.model_validate(message)
    except ValueError as exc:
        raise IntegrityError(f"invalid {what}: {exc}") from None


def from_json_message(
    message: LabelMessage | dict[str, Any] | bytes | str,
) -> tuple[MessageHeader, list[str], np.ndarray]:
    """Validate and verify a JSON message (raises :class:`IntegrityError`)."""
    parsed = validated(LabelMessage, message, what="message")
    labels = np.asarray(parsed.body.noisy_labels, dtype=np.float64)
    verify(parsed.header, parsed.body.example_ids, labels)
    return parsed.header, list(parsed.body.example_ids), labels


def decode_header(data: bytes | memoryview) -> MessageHeader:
    """Parse only the header of a binary message (its first bytes; the body is not checked).

    For showing a release's public parameters and noisy histogram without reading its body;
    :func:`decode_binary` is what verifies a whole message.
    """
    return _decode_prefix_and_header(memoryview(data))[0]


def _decode_prefix_and_header(view: memoryview) -> tuple[MessageHeader, int]:
    """The header and the offset just past it (raises :class:`IntegrityError`)."""
    if len(view) < _PREFIX.size:
        raise IntegrityError("message is truncated (no prefix)")
    magic, version, header_len = _PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise IntegrityError("not a label-DP message (bad magic)")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise IntegrityError(f"unsupported message format_version {version}")
    end = _PREFIX.size + header_len
    if len(view) < end:
        raise IntegrityError("message is truncated (header)")
    try:
        header = MessageHeader.model_validate_json(bytes(view[_PREFIX.size : end]))
    except ValueError as exc:
        raise IntegrityError(f"invalid message header: {exc}") from None
    if header.format_version != version:
        raise IntegrityError(
            f"the prefix says format_version {version}, the header {header.format_version}"
        )
    return header, end
