"""``--fail-on`` gates: ``eval_loss>2.0`` fails the command when the job's final
``eval_loss`` is above 2.0. A gate is checked against the job's last reported
value of each metric, once it SUCCEEDED; a metric it names that the job never
reported fails it too (a gate that cannot be checked must not pass)."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}

# A metric name (anything without spaces or operator characters), an operator,
# a number.
_GATE = re.compile(
    r"^\s*(?P<metric>[^\s<>=!]+)\s*"
    r"(?P<op>>=|<=|==|!=|>|<)\s*"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)


class GateSyntaxError(ValueError):
    pass


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Gate:
    expression: str
    metric: str
    op: str
    threshold: float

    @classmethod
    def parse(cls, expression: str) -> Gate:
        match = _GATE.match(expression)
        if match is None or _is_number(match["metric"]):
            raise GateSyntaxError(
                f"{expression!r} is not METRIC OP NUMBER (OP one of "
                f"{' '.join(sorted(OPERATORS, key=len))}), for example 'eval_loss>2.0'"
            )
        threshold = float(match["value"])
        if not math.isfinite(threshold):
            raise GateSyntaxError(f"{expression!r}: the threshold must be a finite number")
        return cls(expression.strip(), match["metric"], match["op"], threshold)

    def check(self, metrics: Mapping[str, float]) -> GateResult:
        value = metrics.get(self.metric)
        if value is None:
            message = f"failed: {self.metric} was never reported, so the gate cannot pass"
            return GateResult(self, None, False, message)
        failed = OPERATORS[self.op](value, self.threshold)
        verdict = "failed" if failed else "passed"
        return GateResult(
            self,
            value,
            not failed,
            f"{self.metric}={value:.6g}: {verdict} (fails when {self.expression})",
        )


@dataclass(frozen=True)
class GateResult:
    gate: Gate
    value: float | None
    passed: bool | None  # None: not checked (the job did not succeed)
    message: str

    def as_json(self) -> dict[str, Any]:
        return {
            "expression": self.gate.expression,
            "metric": self.gate.metric,
            "operator": self.gate.op,
            "threshold": self.gate.threshold,
            "value": self.value,
            "passed": self.passed,
            "message": self.message,
        }


def not_checked(gate: Gate, status: str) -> GateResult:
    return GateResult(gate, None, None, f"not checked: the job is {status}")
