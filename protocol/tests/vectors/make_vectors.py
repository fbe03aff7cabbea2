"""Independent reference for switchyard's block hasher (XXH3-64, seed 1337, chained).

Run: pip install xxhash && python3 make_vectors.py > block_hashes.json
"""
import json
import struct

import xxhash

SEED = 1337


def local_hash(tokens):
    return xxhash.xxh3_64_intdigest(struct.pack("<%dI" % len(tokens), *tokens), seed=SEED)


def chained(tokens, block_size):
    out, parent = [], None
    for i in range(len(tokens) // block_size):
        local = local_hash(tokens[i * block_size:(i + 1) * block_size])
        h = local if parent is None else xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, local), seed=SEED)
        out.append(h)
        parent = h
    return out


cases = [
    {"block_size": 4, "tokens": [1, 2, 3, 4, 5, 6, 7, 8, 9]},
    {"block_size": 16, "tokens": list(range(64))},
    {"block_size": 16, "tokens": [151643, 0, 4294967295, 7] * 12},
    {"block_size": 1, "tokens": [42, 42, 42]},
    {"block_size": 8, "tokens": [(i * 2654435761) % 150000 for i in range(77)]},
]
for case in cases:
    case["local"] = [local_hash(case["tokens"][i * case["block_size"]:(i + 1) * case["block_size"]])
                     for i in range(len(case["tokens"]) // case["block_size"])]
    case["chained"] = chained(case["tokens"], case["block_size"])
print(json.dumps(cases, indent=1))
