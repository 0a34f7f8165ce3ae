"""What the test process and the checker both use: the wire format (wire.py), framing and interpreter set-up
(child_runtime.py), the warm interpreter both are forked from (zygote.py) and `runtime/` (our `scicode`
helpers and compatibility shims). Run by path under `python_binary`: standard library and the numeric packages only.
"""
