"""The untrusted side: the program of the confined test process (runner.py), which runs model-written code.

Run by path under `python_binary` (standard library and the numeric packages only; its modules import each other and the
shared ones by plain name); the `stages` package never imports it.
"""
