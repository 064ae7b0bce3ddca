"""Rate limiting and the stderr progress line of a producing run."""

from __future__ import annotations

import time
from typing import Callable, TextIO


class TokenBucket:
    """Allows ``rate`` records per second on average with bursts of at most ``burst``.

    ``delay()`` takes a token and says how long to wait before using it. Tokens may go
    into debt, so a caller that always waits the returned delay never exceeds the rate,
    and a caller that falls behind catches up only by ``burst`` records.
    """

    def __init__(self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        # 50 ms worth by default: smooth at any rate yet cheap on sleeps at high rates.
        self.capacity = burst if burst is not None else max(1.0, rate / 20)
        self._clock = clock
        self._tokens = self.capacity
        self._last = clock()

    def delay(self) -> float:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class ProgressLine:
    """A self-redrawing ``\\r`` progress line on a terminal; a plain line every few seconds in a log."""

    def __init__(self, stream: TextIO, total: int | None = None, enabled: bool = True):
        self.stream = stream
        self.total = total
        self.enabled = enabled
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._every_s = 0.25 if self._tty else 5.0
        self._next_draw = 0.0
        self._width = 0

    def update(self, sent: int, failed: int, queued: int, elapsed_s: float, force: bool = False) -> None:
        if not self.enabled or (elapsed_s < self._next_draw and not force):
            return
        self._next_draw = elapsed_s + self._every_s
        line = self.render(sent, failed, queued, elapsed_s)
        if self._tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def render(self, sent: int, failed: int, queued: int, elapsed_s: float) -> str:
        rate = sent / elapsed_s if elapsed_s > 0 else 0.0
        stats = f"sent {sent:,}  failed {failed:,}  in flight {queued:,}  {rate:,.0f}/s  {elapsed_s:.1f}s"
        if not self.total:
            return stats
        done = min(1.0, (sent + failed) / self.total)
        filled = int(done * 20)
        return f"[{'#' * filled}{'-' * (20 - filled)}] {done:4.0%}  {stats}"

    def close(self) -> None:
        if self.enabled and self._tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
