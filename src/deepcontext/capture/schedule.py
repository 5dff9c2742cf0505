"""Step schedules in torch.profiler's terms: skip ``wait`` steps, run ``warmup`` steps with
capture on but discarded, record ``active`` steps; ``repeat`` cycles (0 = forever)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DeepContextError

WAIT, WARMUP, ACTIVE, DONE = "wait", "warmup", "active", "done"


@dataclass(frozen=True)
class Schedule:
    wait: int = 0
    warmup: int = 0
    active: int = 1
    repeat: int = 0
    skip_first: int = 0

    def __post_init__(self) -> None:
        if min(self.wait, self.warmup, self.repeat, self.skip_first) < 0 or self.active < 1:
            raise DeepContextError("schedule needs wait, warmup, repeat, skip_first >= 0 and active >= 1")

    def phase(self, step: int) -> str:
        """The phase of step number ``step`` (0-based)."""
        if step < self.skip_first:
            return WAIT
        step -= self.skip_first
        cycle = self.wait + self.warmup + self.active
        if self.repeat and step >= cycle * self.repeat:
            return DONE
        pos = step % cycle
        if pos < self.wait:
            return WAIT
        if pos < self.wait + self.warmup:
            return WARMUP
        return ACTIVE


def schedule(*, wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 0,
             skip_first: int = 0) -> Schedule:
    return Schedule(wait, warmup, active, repeat, skip_first)
