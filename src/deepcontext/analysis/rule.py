"""The rule interface: a small class with an id, a category, documented thresholds and
``check(ctx)`` that yields findings. Subclasses register themselves in the registry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .context import AnalysisContext
    from .finding import Finding


@dataclass(frozen=True, slots=True)
class Threshold:
    """A tunable number with the reason it has this value (shown in docs and ``--list-rules``)."""

    value: float
    why: str


#: Fractions of the profiled time shared by most rules: below NOTE a finding is noise, from
#: WARNING it is worth a change, from ERROR it is the first thing to fix.
NOTE_FRACTION = Threshold(0.002, "below 0.2% of the run a fix is not worth the reader's time")
WARNING_FRACTION = Threshold(0.05, "5% of the run: a gain a measurement of the fix can show "
                                   "(>= 1.05x) above run-to-run noise; the paper's fixes saved "
                                   "6-66%")
ERROR_FRACTION = Threshold(0.20, "a fifth of the run: fix this first")


class Rule:
    """Base class of every rule. Set ``id``, ``category``, ``description`` and ``thresholds``
    and implement ``check``; instantiate with keyword overrides of threshold values."""

    id: ClassVar[str] = ""
    category: ClassVar[str] = ""
    description: ClassVar[str] = ""
    thresholds: ClassVar[dict[str, Threshold]] = {}

    def __init__(self, **overrides: float) -> None:
        unknown = set(overrides) - set(self.thresholds)
        if unknown:
            raise ValueError(f"rule {self.id}: unknown thresholds {sorted(unknown)}")
        self.params: dict[str, float] = {k: t.value for k, t in self.thresholds.items()}
        self.params.update(overrides)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # every rule shares the three severity fractions unless it sets its own
        cls.thresholds = {"note_fraction": NOTE_FRACTION, "warning_fraction": WARNING_FRACTION,
                          "error_fraction": ERROR_FRACTION, **cls.thresholds}

    def t(self, name: str) -> float:
        """The value of threshold ``name``."""
        return self.params[name]

    def check(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """Yield the findings of this rule on ``ctx``."""
        raise NotImplementedError

    # helpers shared by the built-in rules
    def severity_for(self, ctx: AnalysisContext, seconds: float) -> str | None:
        """The severity a gain of ``seconds`` earns, or None when it is below the note floor."""
        frac = ctx.fraction(seconds)
        if frac < self.t("note_fraction"):
            return None
        return ctx.severity(frac, self.t("warning_fraction"), self.t("error_fraction"))
