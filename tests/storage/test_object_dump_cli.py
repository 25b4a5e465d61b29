"""``fjord object dump`` as an operator runs it: the real console script in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from storage.config import BucketURL
from storage.objects import format as fmt
from storage.stream_record_batch import StreamRecordBatch

if TYPE_CHECKING:
    from conftest import S3Server

FJORD = Path(sys.executable).parent / "fjord"


def _fjord(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(FJORD)] if FJORD.exists() else [sys.executable, "-m", "node.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def _object() -> tuple[bytes, list[StreamRecordBatch], fmt.ObjectBuilder]:
    batches = [StreamRecordBatch(3, 0, 4, 1, b"k" * 138), StreamRecordBatch(3, 0, 5, 1, b"v" * 48)]
    batches += [StreamRecordBatch(4, 2, 50_390 + i * 15, 15, bytes([i]) * 1500) for i in range(20)]
    batches += [StreamRecordBatch(5, 1, 8376, 1008, b"z" * 3000)]
    builder = fmt.ObjectBuilder(block_size=10_000)
    builder.add_all(batches)
    data = builder.finish()
    return data, batches, builder


def _expected(data: bytes, builder: fmt.ObjectBuilder, batches: list[StreamRecordBatch] | None) -> list[str]:
    index_position = len(data) - fmt.FOOTER_SIZE - len(builder.entries) * fmt.INDEX_ENTRY_SIZE
    lines = [f"indexStartPosition: {index_position}", f"indexBlockLength: {len(builder.entries) * 36}"]
    for entry in builder.entries:
        lines.append(entry.describe())
        for b in batches or []:
            if b.stream_id == entry.stream_id and entry.start_offset <= b.base_offset < entry.end_offset:
                lines.append(
                    f"  StreamRecordBatch{{streamId={b.stream_id}, epoch={b.epoch}, baseOffset={b.base_offset}, "
                    f"count={b.count}, size={len(b.payload)}}}"
                )
    return lines


def test_dump_of_a_local_file_prints_footer_and_one_line_per_block(tmp_path: Path) -> None:
    data, batches, builder = _object()
    path = tmp_path / "78"
    path.write_bytes(data)
    result = _fjord("object", "dump", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == _expected(data, builder, None)
    assert "streamId=3, startOffset=4, endOffset=6, recordCount=2, startPosition=0, size=262" in result.stdout
    assert len(builder.entries) > 3  # stream 4 spans several blocks

    with_records = _fjord("object", "dump", str(path), "--records")
    assert with_records.returncode == 0, with_records.stderr
    assert with_records.stdout.splitlines() == _expected(data, builder, batches)
    assert "  StreamRecordBatch{streamId=3, epoch=0, baseOffset=4, count=1, size=138}" in with_records.stdout


def test_dump_by_key_from_a_file_bucket(tmp_path: Path) -> None:
    data, _batches, builder = _object()
    key = fmt.object_key(78, "_fjord_fjord")
    (tmp_path / key).parent.mkdir(parents=True)
    (tmp_path / key).write_bytes(data)
    result = _fjord("object", "dump", key, "--bucket", "0@file://bucket", cwd=tmp_path)
    assert result.returncode == 1 and "not a directory" in result.stderr  # relative to the working directory
    result = _fjord("object", "dump", key, "--bucket", f"0@file://{tmp_path}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == _expected(data, builder, None)


def test_dump_by_key_from_s3(s3_server: S3Server, s3_bucket_url: BucketURL) -> None:
    data, batches, builder = _object()
    key = fmt.object_key(5, "_fjord_c1")
    s3_server.client().put_object(Bucket=s3_bucket_url.bucket, Key=key, Body=data)
    url = s3_server.bucket_url_text(s3_bucket_url.bucket)
    result = _fjord("object", "dump", key, "--bucket", url, "--records")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == _expected(data, builder, batches)
    missing = _fjord("object", "dump", "no/such/key", "--bucket", url)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"fjord: no/such/key: no such object in s3://{s3_bucket_url.bucket} at " + str(
        s3_bucket_url.endpoint
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"hello, this is a text file and certainly not an object" * 2, "bad footer magic"),
        (b"", "too short"),
        (None, "No such file or directory"),
        ("truncated", "bad footer magic"),
        ("directory", "Is a directory"),
    ],
)
def test_what_is_not_an_object_gets_one_line_and_exit_code_1(
    tmp_path: Path, content: bytes | str | None, problem: str
) -> None:
    path = tmp_path / "thing"
    if content == "truncated":
        path.write_bytes(_object()[0][:-20])
    elif content == "directory":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    result = _fjord("object", "dump", str(path))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"fjord: {path}: ") and problem in lines[0]


def test_a_bucket_directory_the_system_refuses_gets_one_line(tmp_path: Path) -> None:
    refused = tmp_path / ("d" * 300)  # a name too long to look at
    result = _fjord("object", "dump", "some-key", "--bucket", f"0@file://{refused}")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == f"fjord: --bucket: {refused}: File name too long\n"


def test_corrupt_block_is_reported_after_the_blocks_that_decoded(tmp_path: Path) -> None:
    data, _batches, builder = _object()
    broken = bytearray(data)
    last = builder.entries[-1]
    broken[last.position] = 0x00  # the last block's magic
    path = tmp_path / "broken"
    path.write_bytes(bytes(broken))
    result = _fjord("object", "dump", str(path), "--records")
    assert result.returncode == 1
    assert f"fjord: {path}: bad data block magic 0x00 at byte {last.position}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines()[-1] == last.describe()
