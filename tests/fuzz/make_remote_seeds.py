#!/usr/bin/env python3
"""Writes the seeds of tests/fuzz/fuzz_remote_worker.cpp into tests/data/remote-messages/.

Each seed is a stream: chunks of a 3-byte little-endian length and a serialized
stoker.remote.v1.Request (proto/stoker/remote/worker.proto), encoded here by hand (protobuf's
wire format: varints and length-delimited fields) so no protobuf module is needed. "@DEMO@"
stands for tests/data/demo (the harness substitutes it). Rerun after changing the protocol:
    python3 tests/fuzz/make_remote_seeds.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "remote-messages")
DEMO = os.path.join(HERE, "..", "data", "demo")
TOKEN = b"stoker-fuzz-token"
MAJOR, MINOR = 1, 0  # daemon/remote/protocol.hpp: kWorkerMajor, kWorkerMinor


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, value):
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def message(*fields):
    return b"".join(field(n, v) for n, v in fields if v is not None)


def job_yaml(steps, dtype):
    # The shape config::parse_remote sends (RemoteConfig::worker_yaml): one job, the pixel keys.
    return ("jobs:\n  demo:\n    source: {root: \"@DEMO@\"}\n    batch_size: 4\n    seed: 7\n"
            "    pipeline:\n      - decode: {}\n" + steps + "    output: {dtype: %s}\n" % dtype)


TRAIN = "      - random_resized_crop: {size: 32}\n      - horizontal_flip: {}\n"
TAWIDE = "      - random_resized_crop: {size: 24}\n      - trivial_augment_wide\n"


def open_req(major=MAJOR, token=TOKEN, yaml=job_yaml(TRAIN, "uint8"), sample_bytes=3 * 32 * 32, compression=0):
    o = message((1, major), (2, MINOR), (3, token), (4, "demo"), (5, yaml), (6, "@DEMO@"),
                (7, "gpu.yaml"), (8, 1234), (9, sample_bytes), (10, compression or None))
    return field(1, o)


def item_req(ident, path, epoch=0, draw=0, member=False, offset=0, size=0):
    i = message((1, ident), (2, path), (3, offset or None), (4, size or None), (5, member or None),
                (6, epoch or None), (7, draw or None))
    return field(2, i)


def stream(*reqs):
    out = b""
    for r in reqs:
        n = len(r)
        out += n.to_bytes(3, "little") + r
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    flower = "@DEMO@/flower/flower_00.jpg"
    flower_size = os.path.getsize(os.path.join(DEMO, "flower", "flower_00.jpg"))
    seeds = {
        "open-items": stream(open_req(), item_req(1, flower, 0, 3), item_req(2, "@DEMO@/insect/insect_02.jpg", 1, 4),
                             item_req(3, flower, 2, 5, member=True, offset=0, size=flower_size)),
        "open-zstd-float-tawide": stream(open_req(yaml=job_yaml(TAWIDE, "float32"), sample_bytes=3 * 24 * 24 * 4,
                                                  compression=1),
                                         item_req(9, "@DEMO@/texture/texture_01.jpg", 3, 77)),
        "items-refused": stream(open_req(), item_req(1, "/etc/passwd"), item_req(2, "flower/flower_00.jpg"),
                                item_req(3, "@DEMO@/../demo/flower/flower_00.jpg"),
                                item_req(4, "@DEMO@/flower/flower_00.jpg\0/../../x"),
                                item_req(5, flower, member=True, offset=flower_size - 10, size=100),
                                item_req(6, flower, member=True, offset=0, size=(1 << 30) + 1),
                                item_req(7, "@DEMO@/flower"), item_req(8, "@DEMO@/LICENSE")),
        "bad-major": stream(open_req(major=MAJOR + 1), item_req(1, flower)),
        "wrong-token": stream(open_req(token=b"stoker-fuzz-tokem"), item_req(1, flower)),
        "no-token": stream(open_req(token=None), item_req(1, flower)),
        "item-before-open": stream(item_req(1, flower), open_req()),
        "double-open": stream(open_req(), open_req(), item_req(1, flower)),
        "bad-yaml": stream(open_req(yaml=job_yaml("      - random_resized_crop: {sise: 32}\n", "uint8"))),
        "unknown-step": stream(open_req(yaml=job_yaml("      - trivial_augment_wild\n", "uint8"))),
        "source-outside": stream(open_req(yaml=job_yaml(TRAIN, "uint8").replace("@DEMO@", "/"))),
        "sample-bytes-mismatch": stream(open_req(sample_bytes=3 * 32 * 32 + 1), item_req(1, flower)),
        # A length past kMaxRequestBytes (1 MiB): dropped as gRPC drops it; the stream goes on.
        "oversized-declared": b"\xff\xff\x7f" + item_req(1, flower),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), os.path.normpath(OUT)), file=sys.stderr)


if __name__ == "__main__":
    main()
