"""The HTML pages: the writer every page is rendered by (`writer`) and every page's template (`templates/`): a run's
report (the summarize stage), the comparison of two runs (`compare`) and the index of a results folder (`runs`).

Which page shows what is decided by the package that writes it; here is only how a page is written (Jinja2 with
autoescaping on, the page's own script allowed by its CSP hash, links that work from disk).
"""
