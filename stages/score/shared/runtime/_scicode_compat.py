"""Compatibility shims installed in the SciCode test process only (never in the pipeline itself).

* `scipy.integrate.simps`: removed in SciPy 1.14; problems 2 and 28 import it in their
  `required_dependencies`. When the installed SciPy lacks it, `simps(y, x=None, dx=1.0, axis=-1,
  even=None)` is provided with the signature of SciPy <= 1.13: it calls `scipy.integrate.simpson`
  (whose default for an even number of samples is the same Cartwright correction SciPy 1.11-1.13 used
  when `even` was None); `even='first'|'last'|'avg'` reproduce the older rules (Simpson on N-2
  intervals plus a trapezoid on the last / first interval, or their mean).

NumPy 2 removed aliases such as `np.trapz`, `np.float_` and `np.Inf`; none of the 338 official steps
(reference code of the validation split, test cases and dependencies of both splits) uses them, so no
NumPy shim is installed: code that uses a removed alias fails as it would under NumPy 2 anywhere.
"""

from __future__ import annotations

from typing import Any

SHIMMED: list[str] = []


def _simps_with_old_signature(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1, even: Any = None) -> Any:
    import numpy as np
    from scipy.integrate import simpson, trapezoid

    if even is None or even == "simpson":
        return simpson(y, x=x, dx=dx, axis=axis)
    if even not in ("avg", "first", "last"):
        raise ValueError("Parameter 'even' must be 'simpson', 'avg', 'last', or 'first'.")
    y = np.asarray(y)
    count = y.shape[axis]
    if count % 2 == 1:
        return simpson(y, x=x, dx=dx, axis=axis)

    def part(values: Any, start: int, stop: int | None) -> Any:
        return np.take(values, range(start, stop if stop is not None else count), axis=axis)

    def segment(start: int, stop: int | None, rule: Any) -> Any:
        ys = part(y, start, stop)
        if x is None:
            return rule(ys, dx=dx, axis=axis)
        xs = np.asarray(x)
        xs = part(xs, start, stop) if xs.ndim > 1 else xs[start:stop]
        return rule(ys, x=xs, axis=axis)

    first = segment(0, count - 1, simpson) + segment(count - 2, None, trapezoid)
    last = segment(0, 2, trapezoid) + segment(1, None, simpson)
    if even == "first":
        return first
    if even == "last":
        return last
    return (first + last) / 2.0


def install() -> list[str]:
    """Install the shims this environment needs; returns their names."""
    import scipy.integrate

    if not hasattr(scipy.integrate, "simps"):
        scipy.integrate.simps = _simps_with_old_signature
        SHIMMED.append("scipy.integrate.simps")
    return list(SHIMMED)
