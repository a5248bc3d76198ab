"""The wire message: both encodings round-trip, carry one digest, and refuse tampering."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import IntegrityError
from shared.message import (
    FORMAT_VERSION,
    BodyDigest,
    MessageHeader,
    NoisyHistogram,
    body_digest,
    body_sha256,
    check_example_id,
    decode_binary,
    decode_header,
    encode_binary,
    encode_sections,
    encode_sections_of_pieces,
    from_json_message,
    json_from_sections,
    to_json_message,
)


def make_header(ids: list[str], labels: np.ndarray, **overrides: object) -> MessageHeader:
    fields: dict[str, object] = {
        "release_id": "r1",
        "dataset": "clicks",
        "created": datetime(2026, 11, 21, tzinfo=UTC),
        "mechanism": "rpwithprior",
        "params": {"a1": 0.0, "a2": 1.0, "zeta": 0.1, "epsilon": 1.0},
        "epsilon1": 0.1,
        "epsilon2": 0.9,
        "label_min": 0.0,
        "label_max": 1.0,
        "default_label": 0.0,
        "histogram": NoisyHistogram(edges=[0.0, 0.5, 1.0], probs=[0.4, 0.6]),
        "n": len(ids),
        "body_sha256": body_sha256(ids, labels),
    }
    fields.update(overrides)
    return MessageHeader.model_validate(fields)


def test_binary_round_trip_in_small_chunks() -> None:
    ids = [f"click-{i}" for i in range(1000)]
    labels = np.linspace(-0.1, 1.1, 1000)
    header = make_header(ids, labels)
    blob = b"".join(encode_binary(header, ids, labels, chunk=64))
    decoded_header, decoded_ids, decoded_labels = decode_binary(blob)
    assert decoded_header == header
    assert decoded_ids == ids
    np.testing.assert_array_equal(decoded_labels, labels)


def test_json_and_binary_carry_the_same_digest() -> None:
    ids = ["a", "b", "c"]
    labels = np.array([0.25, 0.5, 1 / 3])
    header = make_header(ids, labels)
    text = to_json_message(header, ids, labels).model_dump_json()
    json_header, json_ids, json_labels = from_json_message(text)
    assert json_header.body_sha256 == header.body_sha256
    np.testing.assert_array_equal(json_labels, labels)  # floats survive JSON exactly
    assert json_ids == ids


def test_empty_body_round_trips() -> None:
    header = make_header([], np.array([]))
    _, ids, labels = decode_binary(b"".join(encode_binary(header, [], np.array([]))))
    assert ids == [] and labels.size == 0


def test_tampered_binary_body_is_refused() -> None:
    ids = ["a", "b"]
    labels = np.array([0.1, 0.2])
    blob = bytearray(b"".join(encode_binary(make_header(ids, labels), ids, labels)))
    blob[-1] ^= 0x01
    with pytest.raises(IntegrityError, match="sha256"):
        decode_binary(bytes(blob))


def test_tampered_json_label_is_refused() -> None:
    ids = ["a", "b"]
    labels = np.array([0.1, 0.2])
    message = to_json_message(make_header(ids, labels), ids, labels).model_dump()
    message["body"]["noisy_labels"][0] = 0.3
    with pytest.raises(IntegrityError, match="sha256"):
        from_json_message(message)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b[:3], "truncated"),
        (lambda b: b"XXXX" + b[4:], "magic"),
        (lambda b: b[:4] + (FORMAT_VERSION + 1).to_bytes(2, "little") + b[6:], "format_version"),
        (lambda b: b[:-8], "label bytes"),
    ],
)
def test_malformed_binary_is_refused(mutate: object, match: str) -> None:
    ids = ["a"]
    labels = np.array([0.5])
    blob = b"".join(encode_binary(make_header(ids, labels), ids, labels))
    with pytest.raises(IntegrityError, match=match):
        decode_binary(mutate(blob))  # type: ignore[operator]


def test_header_refuses_unknown_fields_and_bad_values() -> None:
    with pytest.raises(ValueError, match="extra"):
        make_header([], np.array([]), surprise=1)
    with pytest.raises(ValueError, match="epsilon1"):
        make_header([], np.array([]), epsilon1=0.0)
    with pytest.raises(ValueError, match="mechanism"):
        make_header([], np.array([]), mechanism="laplace")


@pytest.mark.parametrize("bad", ["", "a\nb", "abc\n", "a,b", "x" * 129, "é"])
def test_example_ids_are_restricted(bad: str) -> None:
    with pytest.raises(ValueError, match="example_id"):
        check_example_id(bad)


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=30),
)
def test_any_finite_body_round_trips(labels: list[float]) -> None:
    ids = [f"id{i}" for i in range(len(labels))]
    values = np.array(labels, dtype=np.float64)
    header = make_header(ids, values)
    _, got_ids, got = decode_binary(b"".join(encode_binary(header, ids, values, chunk=16)))
    assert got_ids == ids
    np.testing.assert_array_equal(got, values)


def test_model_dim_round_trips_and_version_1_messages_are_still_read() -> None:
    ids = ["a", "b"]
    labels = np.array([0.25, 0.75])
    header = make_header(ids, labels, model_dim=115)
    assert header.format_version == FORMAT_VERSION == 4
    for blob, decode in (
        (b"".join(encode_binary(header, ids, labels)), decode_binary),
        (to_json_message(header, ids, labels), from_json_message),
    ):
        assert decode(blob)[0].model_dim == 115
    # A version-1 writer knew no model_dim: its messages still decode, with model_dim None.
    old = make_header(ids, labels, format_version=1)
    blob = b"".join(encode_binary(old, ids, labels))
    assert blob[4:6] == (1).to_bytes(2, "little")
    decoded = decode_binary(blob)[0]
    assert decoded.format_version == 1 and decoded.model_dim is None
    assert from_json_message(to_json_message(old, ids, labels))[0] == old


def test_label_mean_round_trips_and_version_2_messages_are_still_read() -> None:
    ids = ["a", "b"]
    labels = np.array([0.25, 0.75])
    header = make_header(ids, labels, label_mean=0.5, label_mean_epsilon=0.03)
    for blob, decode in (
        (b"".join(encode_binary(header, ids, labels)), decode_binary),
        (to_json_message(header, ids, labels), from_json_message),
    ):
        decoded = decode(blob)[0]
        assert (decoded.label_mean, decoded.label_mean_epsilon) == (0.5, 0.03)
    old = make_header(ids, labels, format_version=2)
    decoded = decode_binary(b"".join(encode_binary(old, ids, labels)))[0]
    assert decoded.format_version == 2 and decoded.label_mean is None


def test_derived_values_round_trip_and_version_3_messages_are_still_read() -> None:
    """Format 4 carries the DP mean's variance and the recommended transform (read, not redone)."""
    ids = ["a", "b"]
    labels = np.array([0.25, 0.75])
    header = make_header(
        ids,
        labels,
        label_mean=0.5,
        label_mean_epsilon=0.03,
        label_mean_variance=0.125,
        recommended_transform="debiased",
    )
    for blob, decode in (
        (b"".join(encode_binary(header, ids, labels)), decode_binary),
        (to_json_message(header, ids, labels), from_json_message),
    ):
        decoded = decode(blob)[0]
        assert (decoded.label_mean_variance, decoded.recommended_transform) == (0.125, "debiased")
    old = make_header(ids, labels, format_version=3, label_mean=0.5, label_mean_epsilon=0.03)
    decoded = decode_binary(b"".join(encode_binary(old, ids, labels)))[0]
    assert decoded.format_version == 3 and decoded.label_mean_variance is None
    assert decoded.recommended_transform is None


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"label_mean": 0.5}, "go together"),
        ({"label_mean_epsilon": 0.01}, "go together"),
        ({"label_mean": 1.5, "label_mean_epsilon": 0.01}, "within"),
        ({"label_mean": 0.5, "label_mean_epsilon": 5.0}, "part of it"),
        ({"label_mean": 0.5, "label_mean_epsilon": 0.0}, "label_mean_epsilon"),
    ],
)
def test_header_refuses_an_inconsistent_label_mean(fields: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_header([], np.array([]), **fields)


@pytest.mark.parametrize("bad", [0, -3, 10**9 + 1, 2.5, "ten", True])
def test_header_refuses_a_bad_model_dim(bad: object) -> None:
    with pytest.raises(ValueError, match="model_dim"):
        make_header([], np.array([]), model_dim=bad)


@given(
    ids=st.lists(st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True), min_size=1, max_size=20),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_one_codec_the_sections_render_the_same_json_at_any_chunking(
    ids: list[str], chunk: int
) -> None:
    """The producer stores tagged sections; the JSON served from them is the message."""
    labels = np.linspace(-1.5, 2.5, len(ids))
    header = make_header(ids, labels)
    sections = list(encode_sections(header, ids, labels, chunk=chunk))
    assert b"".join(data for _, data in sections) == b"".join(encode_binary(header, ids, labels))
    rendered = b"".join(json_from_sections(sections))
    got_header, got_ids, got_labels = from_json_message(rendered)
    assert got_header == header and got_ids == ids
    np.testing.assert_array_equal(got_labels, labels)


@given(
    ids=st.lists(st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True), max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_sections_of_id_pieces_are_the_sections_of_the_joined_ids(
    ids: list[str], cuts: list[int], chunk: int
) -> None:
    """Ids handed over in pieces (some empty) encode to the same tagged sections, chunk for
    chunk, and the same body digest, as the ids joined first."""
    labels = np.linspace(-1.5, 2.5, len(ids))
    bounds = [0, *sorted(min(cut, len(ids)) for cut in cuts), len(ids)]
    pieces = ["\n".join(ids[a:b]).encode() for a, b in zip(bounds, bounds[1:], strict=False)]
    header = make_header(ids, labels)
    assert body_digest(pieces, [labels]) == header.body_sha256
    fed = BodyDigest()
    for piece in pieces:
        fed.update(memoryview(piece))  # any bytes-like piece
    for part in np.array_split(labels, max(1, chunk % 4)):
        fed.labels(part)
    assert fed.hexdigest() == header.body_sha256
    assert list(encode_sections_of_pieces(header, pieces, labels, chunk=chunk)) == list(
        encode_sections(header, ids, labels, chunk=chunk)
    )


def test_a_body_digest_takes_its_ids_before_its_labels_and_reads_no_labels_as_none() -> None:
    ids = ["a", "b"]
    digest = BodyDigest()
    digest.update(b"a\nb")
    assert digest.hexdigest() == body_sha256(ids, np.empty(0))
    assert digest.hexdigest() == digest.hexdigest()  # reading it changes nothing
    digest.labels(np.array([1.0, 2.0]))
    assert digest.hexdigest() == body_sha256(ids, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="before the labels"):
        digest.update(b"c")


def test_decode_header_reads_the_header_alone() -> None:
    ids = ["a", "b"]
    labels = np.array([0.25, 0.75])
    header = make_header(ids, labels)
    first, *rest = encode_binary(header, ids, labels)
    assert rest  # the header is the first piece of the encoding; nothing after it is needed
    assert decode_header(first) == header == decode_binary(b"".join([first, *rest]))[0]
    for cut, match in ((3, "no prefix"), (len(first) - 1, "truncated")):
        with pytest.raises(IntegrityError, match=match):
            decode_header(first[:cut])
    with pytest.raises(IntegrityError, match="invalid message header"):
        decode_header(first[:-1] + b"!")
