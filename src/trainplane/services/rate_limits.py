"""Token buckets by key: a burst of ``burst`` requests, then ``per_second``.

Kept in the memory of each API process: with several replicas a key gets
each replica's allowance, which still bounds what one client can make the
database do. Buckets of keys not seen for long are forgotten (at most
``max_keys`` are kept; a forgotten key starts again with a full bucket).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimit:
    def __init__(
        self,
        *,
        burst: int,
        per_second: float,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> int:
        """Takes one request's token for ``key``: 0 when there was one, else
        the whole seconds to wait before the next (for Retry-After)."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
            self._buckets[key] = bucket  # most recently used last
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.updated) * self.per_second
            )
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0
            return max(1, math.ceil((1.0 - bucket.tokens) / self.per_second))
