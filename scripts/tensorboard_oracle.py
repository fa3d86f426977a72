#!/usr/bin/python3
"""Reads test/fixtures/tensorboard/events.tfevents with TensorBoard's own proto definitions (compiled
by Debian's protoc, parsed by Debian's python3-protobuf: a runtime independent of the writer's
protobufjs) and writes oracle.json: every record's CRC checks and its decoded Event.

  apt-get install protobuf-compiler python3-protobuf
  /usr/bin/python3 scripts/tensorboard_oracle.py --tensorboard /path/to/tensorboard-checkout

The checkout's tensorboard/compat/proto/*.proto are compiled into a temporary directory; nothing of
TensorBoard's is kept."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile


def crc32c(data: bytes) -> int:
    # Castagnoli polynomial, reflected (0x82F63B78), as in RFC 3720.
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensorboard", required=True, help="a tensorflow/tensorboard checkout")
    parser.add_argument("--fixture", default=os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "tensorboard"))
    args = parser.parse_args()
    out = tempfile.mkdtemp()
    protos = [os.path.join("tensorboard/compat/proto", f) for f in ("event.proto", "summary.proto", "histogram.proto", "tensor.proto", "tensor_shape.proto", "types.proto", "resource_handle.proto")]
    subprocess.run(["protoc", f"--proto_path={args.tensorboard}", f"--python_out={out}", *protos], check=True)
    sys.path.insert(0, out)
    from tensorboard.compat.proto import event_pb2  # noqa: E402

    data = open(os.path.join(args.fixture, "events.tfevents"), "rb").read()
    records = []
    offset = 0
    while offset < len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        payload = data[offset + 12 : offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[offset + 12 + length : offset + 16 + length])
        offset += 16 + length
        event = event_pb2.Event()
        event.ParseFromString(payload)
        record = {
            "length_crc_ok": masked(crc32c(header)) == length_crc,
            "payload_crc_ok": masked(crc32c(payload)) == payload_crc,
            "wall_time": event.wall_time,
            "step": event.step,
            "what": event.WhichOneof("what"),
        }
        if record["what"] == "file_version":
            record["file_version"] = event.file_version
        if record["what"] == "summary":
            record["values"] = []
            for v in event.summary.value:
                value = {"tag": v.tag, "kind": v.WhichOneof("value")}
                if value["kind"] == "simple_value":
                    value["simple_value"] = v.simple_value
                if value["kind"] == "tensor":
                    value["plugin_name"] = v.metadata.plugin_data.plugin_name
                    value["dtype"] = v.tensor.dtype
                    value["rank"] = len(v.tensor.tensor_shape.dim)
                    value["strings"] = [b.decode("utf-8") for b in v.tensor.string_val]
                record["values"].append(value)
        records.append(record)
    with open(os.path.join(args.fixture, "oracle.json"), "w") as f:
        json.dump({"tensorboard_protos": "tensorflow/tensorboard 2.21.0, tensorboard/compat/proto", "records": records}, f, indent=2)
        f.write("\n")
    print(f"{len(records)} records")


if __name__ == "__main__":
    main()
