"""The findings page: each of the paper's claims tested on what a run measured (``claims``) and
written as Markdown and JSON (``page``)."""
