"""Holds every packet of one NFQUEUE queue for a fixed time, then lets it go: the delay half of
`tc netem delay`, for kernels built without netem. Usage (by scripts/net degrade, inside a host's
namespace): net-delay.py QUEUE DELAY_MS. Packets leave in the order they came; the queue's rule
is --queue-bypass, so packets pass undelayed if this process is gone."""

import heapq
import itertools
import select
import socket
import sys
import time

from netfilterqueue import NetfilterQueue

queue_number, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000
held = []
order = itertools.count()


def hold(packet):
    packet.retain()
    heapq.heappush(held, (time.monotonic() + delay, next(order), packet))


queue = NetfilterQueue()
queue.bind(queue_number, hold, max_len=100000)
incoming = socket.fromfd(queue.get_fd(), socket.AF_NETLINK, socket.SOCK_RAW)
while True:
    wait = max(0.0, held[0][0] - time.monotonic()) if held else 1.0
    ready, _, _ = select.select([incoming], [], [], wait)
    if ready:
        queue.run(block=False)
    now = time.monotonic()
    while held and held[0][0] <= now:
        heapq.heappop(held)[2].accept()
