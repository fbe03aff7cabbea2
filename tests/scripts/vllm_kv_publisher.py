#!/usr/bin/env python3
"""A stand-in vLLM server for switchyard's tests: its KV-event publisher, as vLLM's
`vllm/distributed/kv_events.py` defines it (ZmqEventPublisher: a PUB socket sending
[topic, 8-byte big-endian sequence number, msgpack KVEventBatch], a ROUTER socket replaying
kept batches from a start number and ending with sequence number -1), in either generation of the
event schema, plus the /v1/models and /metrics a scraped vLLM serves.

  vllm_kv_publisher.py HTTP_PORT PUB_PORT REPLAY_PORT old|new

The test drives it on stdin, one JSON command a line, each answered "ok" on stdout:
  {"seq": 3, "events": [...], "send": true, "keep": true}   publish (send) and/or keep for replay
  {"restart": true}                                         forget every kept batch
Events: {"type": "stored", "hashes": [..], "parent": h or null, "tokens": [..],
"block_size": 16, "lora_id": null, "medium": null}, {"type": "removed", "hashes": [..]},
{"type": "cleared"}. Hashes are small integers; the new generation sends each as a 32-byte digest.
"""

import http.server
import json
import sys
import threading
import time

import msgspec
import zmq

HTTP_PORT, PUB_PORT, REPLAY_PORT, GENERATION = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
MODEL = "vllm-model"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


# The older schema (vLLM up to 0.10): tagged arrays, integer hashes, no medium.
class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class OldBlockStored(OldEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


class OldBlockRemoved(OldEvent, tag="BlockRemoved"):
    block_hashes: list[int]


class OldAllBlocksCleared(OldEvent, tag="AllBlocksCleared"):
    pass


# The newer schema: events as maps with a `type` tag, sha256 digests, the medium.
class NewEvent(msgspec.Struct, omit_defaults=False, gc=False, tag_field="type", tag=True):
    pass


class NewBlockStored(NewEvent, tag="BlockStored"):
    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class NewBlockRemoved(NewEvent, tag="BlockRemoved"):
    block_hashes: list[bytes]
    medium: str | None


class NewAllBlocksCleared(NewEvent, tag="AllBlocksCleared"):
    pass


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


def digest(h):
    return h.to_bytes(32, "big")


def event(e):
    old = GENERATION == "old"
    if e["type"] == "stored":
        if old:
            return OldBlockStored(e["hashes"], e.get("parent"), e["tokens"], e["block_size"], e.get("lora_id"))
        parent = e.get("parent")
        return NewBlockStored([digest(h) for h in e["hashes"]], None if parent is None else digest(parent),
                              e["tokens"], e["block_size"], e.get("lora_id"), e.get("medium", "GPU"))
    if e["type"] == "removed":
        if old:
            return OldBlockRemoved(e["hashes"])
        return NewBlockRemoved([digest(h) for h in e["hashes"]], "GPU")
    return OldAllBlocksCleared() if old else NewAllBlocksCleared()


METRICS = f"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="{MODEL}"}} 0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="{MODEL}"}} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",num_gpu_blocks="1000"}} 1.0
"""


class Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/v1/models":
            body, kind = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}), "application/json"
        elif self.path == "/metrics":
            body, kind = METRICS, "text/plain"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", HTTP_PORT), Http)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.bind(f"tcp://127.0.0.1:{PUB_PORT}")
    replay = context.socket(zmq.ROUTER)
    replay.bind(f"tcp://127.0.0.1:{REPLAY_PORT}")
    kept = []
    lock = threading.Lock()
    encoder = msgspec.msgpack.Encoder()

    def serve_replay():
        poller = zmq.Poller()
        poller.register(replay, zmq.POLLIN)
        while True:
            if not poller.poll(100):
                continue
            frames = replay.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            start = int.from_bytes(start, "big")
            with lock:
                for seq, payload in kept:
                    if seq >= start:
                        replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            replay.send_multipart((client, b"", END_SEQ, b""))

    threading.Thread(target=serve_replay, daemon=True).start()
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("restart"):
            with lock:
                kept.clear()
        else:
            batch = EventBatch(time.time(), [event(e) for e in command["events"]],
                               0 if GENERATION == "new" else None)
            payload = encoder.encode(batch)
            seq = command["seq"]
            if command.get("keep", True):
                with lock:
                    kept.append((seq, payload))
            if command.get("send", True):
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
        print("ok", flush=True)


if __name__ == "__main__":
    main()
