"""Ingest parsers: fast path vs line-by-line diagnostics, chunk boundaries, JSON documents."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labels_party.errors import BadInputError
from labels_party.intake.parsing import (
    ExampleStreamParser,
    LabelStreamParser,
    parse_examples_json,
    parse_labels_json,
)

ids_st = st.from_regex(r"[A-Za-z0-9_.:\-]{1,12}", fullmatch=True)
values_st = st.floats(allow_nan=False, allow_infinity=False, width=64)
rows_st = st.lists(st.tuples(ids_st, values_st), min_size=1, max_size=60)


def _feed(parser, data: bytes, cuts: list[int]):
    points = sorted({c % (len(data) + 1) for c in cuts})
    start = 0
    for point in [*points, len(data)]:
        parser.feed(data[start:point])
        start = point
    return parser.finish()


def _csv(rows) -> bytes:
    return ("example_id,value\n" + "".join(f"{i},{v!r}\n" for i, v in rows)).encode()


def _ndjson(rows) -> bytes:
    return "".join(json.dumps({"example_id": i, "value": v}) + "\n" for i, v in rows).encode()


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, cuts=st.lists(st.integers(0, 10_000), max_size=8), crlf=st.booleans())
def test_csv_stream_is_independent_of_chunking(rows, cuts, crlf):
    data = _csv(rows)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    parsed = _feed(LabelStreamParser(fmt="csv"), data, cuts)
    assert parsed.example_ids == [i for i, _ in rows]
    np.testing.assert_array_equal(parsed.values, [v for _, v in rows])  # exact round trip


@settings(max_examples=60, deadline=None)
@given(
    rows=rows_st,
    blanks=st.lists(st.integers(0, 60), max_size=6),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
    fmt=st.sampled_from(["csv", "ndjson"]),
)
def test_where_names_the_line_each_row_came_from(rows, blanks, cuts, fmt):
    """``LabelRows.where`` (used for conflicts found after parsing) = the row's real line."""
    lines = (_csv(rows) if fmt == "csv" else _ndjson(rows)).decode().split("\n")[:-1]
    header = 1 if fmt == "csv" else 0
    for position in sorted(blanks, reverse=True):  # blank lines anywhere after the header
        lines.insert(header + position % (len(lines) - header + 1), "")
    data = ("\n".join(lines) + "\n").encode()
    parsed = _feed(LabelStreamParser(fmt=fmt), data, cuts)
    row_lines = [n for n, line in enumerate(lines, 1) if line and n > header]
    assert [parsed.where(i) for i in range(len(parsed))] == [f"line[{n}]" for n in row_lines]
    assert parse_labels_json(json.dumps({"labels": [
        {"example_id": i, "value": v} for i, v in rows
    ]}).encode()).where(len(rows) - 1) == f"labels[{len(rows) - 1}]"  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_ndjson_stream_is_independent_of_chunking(rows, cuts):
    parsed = _feed(LabelStreamParser(fmt="ndjson"), _ndjson(rows), cuts)
    assert parsed.example_ids == [i for i, _ in rows]
    np.testing.assert_array_equal(parsed.values, [v for _, v in rows])


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(ids_st, min_size=1, max_size=60), cuts=st.lists(st.integers(0, 5000)))
def test_example_stream_is_independent_of_chunking(ids, cuts):
    data = ("\n".join(ids) + "\n").encode()
    assert _feed(ExampleStreamParser(), data, cuts) == ids


@pytest.mark.parametrize(
    ("fmt", "body", "field"),
    [
        ("csv", "example_id,value\na,1\nb,2\nc,zz\n", "line[4].value"),
        ("csv", "example_id,value\na,1\n\nc,nan\n", "line[4].value"),  # blank line still counted
        ("csv", "example_id,value\na,1\nb;2\n", "line[3]"),
        ("csv", "example_id,value\na,1\nb,1e400\n", "line[3].value"),
        ("csv", "id,val\na,1\n", "line[1]"),
        ("ndjson", '{"example_id":"a","value":1}\n[1,2]\n', "line[2]"),
        ("ndjson", '{"example_id":"a","value":1,"x":0}\n', "line[1]"),
        ("ndjson", '{"example_id":"a b","value":1}\n', "line[1].example_id"),
        ("ndjson", '{"example_id":"a","value":Infinity}\n', "line[1].value"),
        ("ndjson", '{"example_id":"a","value":1}{"example_id":"b","value":2}\n', "line[1]"),
    ],
)
def test_stream_errors_name_the_line_and_field(fmt, body, field):
    parser = LabelStreamParser(fmt=fmt)
    with pytest.raises(BadInputError) as caught:
        _feed(parser, body.encode(), [3, 17])
    assert field in [e.field for e in caught.value.errors]


def test_stream_errors_span_chunks_and_are_bounded():
    good = "".join(f"g{i},1\n" for i in range(5000))
    bad = "".join(f"b{i},x\n" for i in range(50))
    parser = LabelStreamParser(fmt="csv")
    with pytest.raises(BadInputError) as caught:
        _feed(parser, f"example_id,value\n{good}{bad}".encode(), list(range(0, 60000, 997)))
    errors = caught.value.errors
    assert len(errors) == 10 and errors[0].field == "line[5002].value"


def test_json_documents():
    rows = parse_labels_json(b'{"labels": [{"example_id": "a", "value": 1}, '
                             b'{"example_id": "b", "value": -2.5}]}')  # fmt: skip
    assert rows.example_ids == ["a", "b"] and rows.values.tolist() == [1.0, -2.5]
    assert parse_examples_json(b'{"example_ids": ["x", "y"]}') == ["x", "y"]
    with pytest.raises(BadInputError) as caught:
        parse_labels_json(b'{"labels": [{"example_id": "a", "value": 1e999}, {"value": 1}]}')
    fields = [e.field for e in caught.value.errors]
    assert fields == ["labels[0].value", "labels[1].example_id"]
    with pytest.raises(BadInputError):
        parse_examples_json(b'{"example_ids": "abc"}')
