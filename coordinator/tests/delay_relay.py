#!/usr/bin/env python3
"""A TCP relay that holds every client->server chunk for a fixed delay before forwarding it
(and, with --reply-delay-ms, every server->client chunk too).

Used by coordinator/tests/netns.rs to lengthen one worker host's path to the server: the
test runs it inside that worker's network namespace and adds an nft DNAT rule there that
sends the worker's connections to the server's address here instead. The relay's own
connections to the server carry SO_MARK=--mark so the DNAT rule leaves them alone.

Per connection and direction: one thread reads and stamps each chunk with its due time
(arrival + delay), one thread sends the chunks in order once due (time.sleep is
clock_nanosleep: tens of microseconds of slack, unlike asyncio's millisecond timeouts).
coordinator/tests/replicas.rs delays a replica's replication stream with it. Prints "listening HOST:PORT" when ready and a
line per connection on stderr.

    delay_relay.py --listen 10.1.2.3:16379 --to 10.1.2.2:6379 --delay-ms 2 --mark 42
"""

import argparse
import queue
import socket
import sys
import threading
import time

SO_MARK = getattr(socket, "SO_MARK", 36)


def addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def relay(client, to, delay, mark, reply_delay=0.0):
    try:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        server.settimeout(5)
        server.connect(to)
        server.settimeout(None)
    except OSError as e:
        print(f"connect {to}: {e}", file=sys.stderr, flush=True)
        close(client)
        return
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pipe(client, server, delay, half_close=True)
    pipe(server, client, reply_delay, half_close=False)


def pipe(src, dst, delay, half_close):
    """Copies src to dst, each chunk held `delay` seconds after it arrived (in order).

    At src's end: dst is shut for writing (half_close) or both are closed."""
    chunks = queue.Queue()

    def read():
        try:
            while True:
                data = src.recv(65536)
                chunks.put((time.monotonic() + delay, data))
                if not data:
                    return
        except OSError:
            chunks.put((0.0, b""))

    def send():
        try:
            while True:
                due, data = chunks.get()
                if not data:
                    if half_close:
                        dst.shutdown(socket.SHUT_WR)
                    else:
                        close(src)
                        close(dst)
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                dst.sendall(data)
        except OSError:
            close(src)
            close(dst)

    for f in (read, send):
        threading.Thread(target=f, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True, type=addr)
    p.add_argument("--to", required=True, type=addr)
    p.add_argument("--delay-ms", required=True, type=float)
    p.add_argument("--mark", type=int, default=42)
    p.add_argument("--reply-delay-ms", type=float, default=0.0)
    a = p.parse_args()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(a.listen)
    ls.listen(512)
    print(f"listening {a.listen[0]}:{a.listen[1]}", flush=True)
    n = 0
    while True:
        client, peer = ls.accept()
        n += 1
        print(f"connection {n} from {peer[0]}:{peer[1]}", file=sys.stderr, flush=True)
        relay(client, a.to, a.delay_ms / 1000.0, a.mark, a.reply_delay_ms / 1000.0)


if __name__ == "__main__":
    main()
