"""Broker benchmark (issue 3, "Performance"): real ``fjord server start`` processes driven by confluent-kafka
clients, one Markdown table on stdout.

    .venv/bin/python bench/broker.py [--quick] [--only NAME ...] [--producers N] [--rounds N] [--dir DIR]
                                     [--compression CODEC]

Every client runs in a process of its own (``multiprocessing``, spawn) so that librdkafka and the Python loops
feeding it never share the broker's GIL. Producers use the issue's settings: 1 KiB records, ``acks=all``,
``batch.size`` 1 MiB, ``linger.ms`` 5; with ``--compression`` the ``produce-1p`` and ``produce-16p`` producers
compress with that codec and send partly compressible values (``broker_clients.compressible_values``) instead of
random bytes, so the broker's part of a compressed produce (decompressing and reading every record) is measured.
Scenarios:

- ``produce-1p`` / ``produce-16p``: closed-loop produce of a fixed volume to a topic with 1 or 16 partitions,
  each on a fresh broker whose WAL cache (3 GiB) and upload threshold (2 GiB) keep uploads out of the run;
  MB/s from the first ``produce()`` to the end of ``flush()``; latency is librdkafka's per-message delivery
  latency (enqueue to acknowledgement, so it includes the client's own queue) sampled on every 64th record.
  ``produce-1p uploading`` (run by ``consume-catchup``) is the same with a 16 MiB upload threshold, so building
  and writing objects is part of it.
- ``consume-tail``: consume, from offset 0, what ``produce-1p`` just wrote; the data is still in the broker's
  LogCache, so this is the in-memory fetch path.
- ``consume-catchup``: a second broker with a small WAL cache and upload threshold is filled, then restarted
  (a clean stop uploads everything; the restarted broker's caches are cold), and the data is consumed from
  offset 0 - every byte comes from object storage through the block cache.
- ``e2e-latency``: a producer at a fixed 20 MB/s stamps each record with ``time.time_ns()`` as it hands it to
  librdkafka; a consumer already waiting at the log end takes (receive time - stamp), polling record by record.
  The broker has the cache sizes and upload threshold of ``config/server.properties`` (what ``make run`` serves
  with), so it uploads objects and evicts cached data while it is measured, as a broker does in use; the run is
  30 s so that several uploads fall into it.

Columns: MB/s (10^6 bytes of record values per second), records/s, latency p50/p99 in ms; for e2e-latency the
producer's own acknowledgement p99 (``ack p99``: linger + the produce round trip, so e2e minus ack is what the
fetch side adds); from the broker's histograms, whose p99 is the upper bound of its bucket: the Produce handling p99
(decoded request to encoded response: validation, WAL write and fdatasync, thread hand-offs), the event-loop lag
p99 (how late a 10 ms timer fired: time any request spent waiting for the loop, the GIL or a CPU) and the gen-2
garbage collections with the bucket bound of the longest; then the broker's peak RSS
during the scenario (psutil, sampled every 50 ms), the broker's CPU seconds (all threads) per GB of record values
(the figure to compare runs by on a shared machine: MB/s moves with other load, CPU per GB hardly does), the number
of object-store PUT and GET requests (the broker's ``fjord_object_store_*`` counters) and the
Produce/Fetch requests the broker served during the scenario (its Prometheus endpoint, ``metrics.port``), and
the scenario's duration. The object store is the local filesystem (``file://``) so S3 server CPU does not eat the
2 cores; it counts one request per call (a large object is one PUT here where S3 would take a multipart upload).

Transactions (issue 9), ``txn``: a 16-partition topic is written by an idempotent producer
(``produce-16p idempotent``), and on another fresh broker by a transactional producer committing every 100 ms
(``produce-16p transactional``; that broker has created and loaded ``__transaction_state`` first, as a running
cluster has it; the disk is synced and the broker quiet before every row). The transactional topic is then
read from offset 0 with ``isolation.level`` read_uncommitted and read_committed (``consume-16p read_uncommitted`` /
``read_committed``; see below for the order). Both produce rows take delivery reports for the sampled records only: a
Python callback per record cost the client about 1.7 CPU s/GB, and during each commit's flush, while librdkafka's
broker thread spins (flushing, it wakes at once whenever records wait for an in-flight slot), that CPU came out of
the broker's share of the 2 cores. Delivery is checked otherwise: the idempotent topic's end offsets must add up to
the records asked for (a shortfall is an error of the row), a transactional record that fails fails its commit, and
each read needs every record. The figures to compare are the transactional/idempotent and
read_committed/read_uncommitted ratios. Single runs of a few seconds move by half on a 2-core box, so the scenario
runs ``--rounds`` times (5): the table shows each row's median round, and the lines after it each round's ratios and
their medians. Within a round each isolation level is read twice, in ABBA order, and the faster read counts: one read
ran at about 160, 230 or 430 MB/s at both levels, by how the 2 cores happened to be shared between the broker
and the client's two busy threads, so a single read per level made the consume ratio a coin toss.

Security (issue 13), ``security``: one fresh broker with a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener
(SCRAM-SHA-512 user made with ``--add-scram``, TLS certificates made for the run). A 16-partition topic is produced
and consumed over PLAINTEXT and another over SASL_SSL (``produce-16p`` / ``consume-16p`` PLAINTEXT and SASL_SSL: the
SASL_SSL/PLAINTEXT ratios are the figures to read); then ``scram-connect``: 1,000 new connections (200 with
``--quick``) each authenticate with SCRAM, 32 at a time, over SASL_PLAINTEXT and over SASL_SSL
(``bench/scram_storm.py``); records/s is authenticated connections per second.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

# The client processes, the broker's side, and the scenarios' runs and table, each in a module of its own.
from bench.broker_clients import RECORD, Job  # noqa: E402
from bench.broker_process import Broker  # noqa: E402
from bench.broker_scenarios import (  # noqa: E402
    FULL,
    QUICK,
    SCRAM_MECHANISM,
    SCRAM_PASSWORD,
    SCRAM_USER,
    Row,
    median_rows,
    ratio_line,
    run_consume,
    run_latency,
    run_produce,
    run_scram_storm,
    shipped_cache_sizes,
    table,
)
from testkit.tls_certs import CertificateAuthority  # noqa: E402


def _announce(name: str) -> None:
    """Starts a scenario on a quiet disk: what earlier scenarios wrote (gigabytes of WAL segments and objects,
    kept until the run ends) is flushed first, so its writeback does not compete with this scenario's fdatasyncs
    (produce-16p right after e2e-latency measured 200 instead of 240-400 MB/s without this)."""
    print(f"running {name} ...", file=sys.stderr, flush=True)
    os.sync()


SCENARIOS = ("produce-1p", "produce-16p", "consume-tail", "consume-catchup", "e2e-latency", "txn", "security")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small volumes (about a minute in all)")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, help="run only these scenarios")
    parser.add_argument("--producers", type=int, default=1, help="producer processes per produce scenario")
    parser.add_argument("--dir", type=Path, help="data directory (default: a temporary one, removed after)")
    parser.add_argument(
        "--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="compression.type of the produce-1p and produce-16p producers",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of the txn scenario, each on a fresh broker (medians reported)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = QUICK if args.quick else FULL
    chosen = set(args.only or SCENARIOS)
    base = args.dir or Path(tempfile.mkdtemp(prefix="fjord-bench-"))
    ctx = mp.get_context("spawn")
    rows: list[Row] = []
    ratios: list[str] = []

    # Caches large enough that nothing is uploaded or evicted while a scenario runs (1 GiB from produce-1p stays
    # under the 2 GiB threshold): produce-1p/16p measure the produce path alone and consume-tail reads what
    # produce-1p left in the LogCache. The cost of uploading is measured by the catch-up
    # fill, whose broker uploads every 16 MiB as it goes.
    roomy = {"s3.wal.cache.size": "3GiB", "s3.wal.upload.threshold": "2GiB", "s3.block.cache.size": "64MiB"}
    hot = Broker(base / "hot", roomy)
    records_1p = sizes.produce_bytes // RECORD // args.producers * args.producers

    def produce_1p() -> None:
        job = Job(hot.bootstrap, "bench-1p", 1, sizes.produce_bytes, compression=args.compression)
        rows.append(run_produce(ctx, hot, "produce-1p", job, args.producers))

    def consume_tail() -> None:
        if "produce-1p" not in chosen:
            run_produce(ctx, hot, "produce-1p", Job(hot.bootstrap, "bench-1p", 1, sizes.produce_bytes), args.producers)
        rows.append(run_consume(ctx, hot, "consume-tail", Job(hot.bootstrap, "bench-1p", 1, records_1p)))

    def latency() -> None:
        cache = shipped_cache_sizes()
        shipped = Broker(base / "shipped", cache)
        shipped.start()
        try:
            row = run_latency(ctx, shipped, sizes)
        finally:
            shipped.stop()
        row.note += "; " + ", ".join(f"{key.removeprefix('s3.')} {value}" for key, value in cache.items())
        rows.append(row)

    def produce_16p() -> None:
        # A broker of its own, so it does not pay for uploading what produce-1p left behind.
        wide = Broker(base / "wide", roomy)
        wide.start()
        try:
            job = Job(wide.bootstrap, "bench-16p", 16, sizes.produce_bytes, compression=args.compression)
            rows.append(run_produce(ctx, wide, "produce-16p", job, args.producers))
        finally:
            wide.stop()

    def catchup() -> None:
        # Small WAL cache and upload threshold: the data is uploaded as it arrives; the restart empties every cache.
        cold = Broker(base / "cold", {"s3.wal.cache.size": "64MiB", "s3.wal.upload.threshold": "16MiB",
                                      "s3.block.cache.size": "64MiB"})
        cold.start()
        try:
            fill = run_produce(
                ctx, cold, "produce-1p uploading", Job(cold.bootstrap, "bench-catchup", 1, sizes.catchup_bytes), 1
            )
            fill.note = (fill.note + " upload threshold 16 MiB: includes building and writing the objects").strip()
            rows.append(fill)
            cold.stop()
            uploaded = cold.objects()
            cold.start()
            job = Job(cold.bootstrap, "bench-catchup", 1, sizes.catchup_bytes // RECORD)
            row = run_consume(ctx, cold, "consume-catchup", job)
            row.note = (row.note + f" read from {uploaded} objects after a restart (cold caches)").strip()
            rows.append(row)
        finally:
            cold.stop()

    def transactions() -> None:
        # Each produce row on a fresh broker (a broker's second 512 MiB ran 15-30% slower than its first, whatever
        # the mode, so sharing one broker favoured whichever row ran first), the reads on the transactional one, each
        # level twice in ABBA order (the faster counts), starting with the other level each round; every round repeats
        # the four rows, the table keeps each one's median round and the ratios' medians follow it.
        rounds: list[dict[str, Row]] = []
        amount = sizes.produce_bytes // 2
        records = amount // RECORD // args.producers * args.producers
        isolations = ["read_uncommitted", "read_committed"]
        for number in range(1, args.rounds + 1):
            got: dict[str, Row] = {}
            for mode in ("idempotent", "transactional"):
                os.sync()  # the last broker's writeback must not compete with this one's fdatasyncs (see _announce)
                txn = Broker(base / f"txn-{number}-{mode}", roomy)
                txn.start()
                try:
                    if mode == "transactional":
                        txn.warm_transactions()
                    txn.wait_quiet()
                    job = Job(txn.bootstrap, "bench-txn", 16, amount, mode=mode, sampled_reports_only=True)
                    row = got[f"produce-16p {mode}"] = run_produce(ctx, txn, f"produce-16p {mode}", job, args.producers)
                    if mode == "idempotent" and (landed := txn.end_offsets_total("bench-txn", 16)) != records:
                        row.note = f"{row.note}; errors: {landed} of {records} records in the topic".lstrip("; ")
                    if mode == "transactional":
                        for isolation in (*isolations, *reversed(isolations)):
                            os.sync()
                            txn.wait_quiet()
                            read = Job(txn.bootstrap, "bench-txn", 16, records, isolation=isolation)
                            name = f"consume-16p {isolation}"
                            row = run_consume(ctx, txn, name, read)
                            first = got.get(name)
                            if first is None:
                                got[name] = row
                                continue
                            faster, slower = (row, first) if row.mb_s > first.mb_s else (first, row)
                            if slower.note:  # the slower read's errors are kept
                                faster.note = f"{faster.note}; {slower.note}".lstrip("; ")
                            got[name] = faster
                        isolations.reverse()
                finally:
                    txn.stop()
                    shutil.rmtree(txn.data_dir, ignore_errors=True)
            rounds.append(got)
            print(f"  round {number}: " + ", ".join(f"{k} {r.mb_s:.1f}" for k, r in got.items()), file=sys.stderr)
        rows.extend(median_rows(rounds))
        for kind, a, b in (("produce-16p", "transactional", "idempotent"),
                           ("consume-16p", "read_committed", "read_uncommitted")):
            ratios.append(ratio_line(rounds, f"{kind} {a} / {b}", f"{kind} {a}", f"{kind} {b}"))

    def security() -> None:
        # One broker serving the same data on a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512),
        # so the SASL_SSL / PLAINTEXT ratios compare like with like.
        ca = CertificateAuthority(base / "certs")
        server = ca.issue("server", server=True)
        secured = Broker(
            base / "security",
            {
                **roomy,
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,SECURE://127.0.0.1:0,"
                "CONTROLLER://127.0.0.1:0",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,"
                "SECURE:SASL_SSL",
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "ssl.keystore.location": str(server.keystore_path),
            },
            ("--add-scram", f"{SCRAM_MECHANISM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"),
        )
        secured.start()
        try:
            amount = sizes.produce_bytes // 2
            records = amount // RECORD // args.producers * args.producers
            sasl = (("sasl.mechanism", SCRAM_MECHANISM), ("sasl.username", SCRAM_USER),
                    ("sasl.password", SCRAM_PASSWORD))
            tls = (("security.protocol", "SASL_SSL"), ("ssl.ca.location", str(ca.cert_path)), *sasl)
            for protocol, listener, client in (("PLAINTEXT", "PLAINTEXT", ()), ("SASL_SSL", "SECURE", tls)):
                host, port = secured.endpoint(listener)
                topic = f"bench-{protocol.lower()}"
                job = Job(f"{host}:{port}", topic, 16, amount, client=client)
                rows.append(run_produce(ctx, secured, f"produce-16p {protocol}", job, args.producers))
                read = Job(f"{host}:{port}", topic, 16, records, client=client)
                rows.append(run_consume(ctx, secured, f"consume-16p {protocol}", read))
            for protocol, listener in (("SASL_PLAINTEXT", "SASL"), ("SASL_SSL", "SECURE")):
                rows.append(run_scram_storm(secured, protocol, listener, ca, sizes.scram_connections))
        finally:
            secured.stop()

    try:
        if chosen & {"produce-1p", "consume-tail"}:
            hot.start()
            try:
                for name, step in (("produce-1p", produce_1p), ("consume-tail", consume_tail)):
                    if name in chosen:
                        _announce(name)
                        step()
            finally:
                hot.stop()
        for name, step in (
            ("e2e-latency", latency),
            ("produce-16p", produce_16p),
            ("consume-catchup", catchup),
            ("txn", transactions),
            ("security", security),
        ):
            if name in chosen:
                _announce(name)
                step()
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (
        f"Fjord broker, {'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs (load average {load}), "
        f"{args.producers} producer process(es), 1 KiB records, acks=all, batch.size 1 MiB, linger.ms 5, "
        f"compression.type {args.compression}"
    )
    print(table(rows, title))
    if ratios:
        print("\n" + "\n".join(ratios))
    if any(r.note and "errors" in r.note for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
