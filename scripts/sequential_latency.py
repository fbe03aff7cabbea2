#!/usr/bin/env python3
"""p50 latency of short non-streamed completions, one request at a time, per target.

A single-threaded client (http.client, one keep-alive connection per target) that takes
almost nothing from the machine's cores, unlike a multi-threaded async client. The targets are
timed in turn, ROUNDS times, REQUESTS requests each time.

    scripts/sequential_latency.py http://127.0.0.1:8100 http://127.0.0.1:8000 [ROUNDS] [REQUESTS]

Each target must serve `qwen3-0.6b` (e.g. `switchyard serve --backend sim --sim-time-scale
1000000`, its engine, or nginx in front of it).
"""
import http.client
import sys
import time
from urllib.parse import urlparse

BODY = b'{"model":"qwen3-0.6b","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}'


def p50_us(url, requests):
    target = urlparse(url)
    connection = http.client.HTTPConnection(target.hostname, target.port)
    took = []
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("POST", "/v1/completions", BODY, {"content-type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        if answer.status != 200:
            sys.exit(f"{url} answered {answer.status}")
        took.append(time.perf_counter() - started)
    took.sort()
    return took[len(took) // 2] * 1e6


def main():
    urls = [a for a in sys.argv[1:] if a.startswith("http")]
    if not urls:
        sys.exit(__doc__)
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    rounds = numbers[0] if numbers else 3
    requests = numbers[1] if len(numbers) > 1 else 2000
    for url in urls:
        p50_us(url, 100)
    for r in range(rounds):
        print(f"round {r + 1}: " + ", ".join(f"{u} {p50_us(u, requests):.0f} us" for u in urls))


if __name__ == "__main__":
    main()
