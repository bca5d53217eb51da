"""Display strings and table files shared by every results table: cells such as "41.0 ± 2.1" and
"+1.2 [−0.4, 2.8], p=0.14", and one writer for the CSV, Markdown, LaTeX and HTML versions.

The CSV holds the tidy numbers at full precision; the other three show the display strings.
"""

from __future__ import annotations

import html
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from condensation.runtime.io import atomic_path, write_text

MISSING = "—"
"""How a NaN is displayed: a dash, never the string 'nan'."""


def write_table(display_df: pd.DataFrame, csv_df: pd.DataFrame, stem: str | os.PathLike, caption: str) -> None:
    """Write ``stem.csv`` (tidy numbers) and ``stem.md``, ``stem.tex``, ``stem.html`` (display
    strings), each atomically.

    The CSV keeps full float precision so it reads back to the same numbers; the Markdown starts
    with ``caption`` as a paragraph; the LaTeX is a bare tabular (caption as a comment) for
    ``\\input`` inside the paper's table environment; the HTML is for the Snakemake report.
    """
    stem = Path(stem)
    write_csv(csv_df, stem.with_name(stem.name + ".csv"))
    write_text(stem.with_name(stem.name + ".md"), caption.strip() + "\n\n" + to_markdown(display_df) + "\n")
    write_text(stem.with_name(stem.name + ".tex"), to_latex(display_df, caption))
    write_text(stem.with_name(stem.name + ".html"), to_html(display_df, caption))


def write_csv(frame: pd.DataFrame, path: str | os.PathLike, float_format: str | None = None) -> None:
    """``frame`` as CSV without its index, written atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format=float_format)


def to_markdown(frame: pd.DataFrame, float_format: str = "") -> str:
    """A Markdown pipe table (pandas' ``to_markdown``, i.e. tabulate), cells shown as given.

    Floats are formatted with ``float_format`` (e.g. ``".4f"``; NaN as a dash), everything else
    with ``str``; tabulate's own number parsing is off, so "47.00" stays "47.00". Newlines become
    spaces and pipes are escaped, so a cell can never split a column. Numeric columns are
    right-aligned.
    """
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return MISSING if math.isnan(value) else format(value, float_format)
        return str(value).replace("\n", " ").replace("|", "\\|")

    shown = frame.apply(lambda column: column.map(cell)).set_axis([cell(c) for c in frame.columns], axis=1)
    align = ["right" if _numeric_column(shown[c]) else "left" for c in shown.columns]
    return shown.to_markdown(index=False, tablefmt="pipe", disable_numparse=True, colalign=align)


def to_html(display_df: pd.DataFrame, caption: str) -> str:
    """An HTML table for the Snakemake report, caption first; Markdown bold becomes ``<b>``."""
    body = display_df.to_html(index=False, escape=True, na_rep=MISSING)
    body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", body)
    return f"<p>{html.escape(caption)}</p>\n{body}\n"


def to_latex(display_df: pd.DataFrame, caption: str = "") -> str:
    """A LaTeX tabular of the display strings: special characters escaped, ``**x**`` as \\textbf."""
    align = "".join("r" if _numeric_column(display_df[c]) else "l" for c in display_df.columns)
    # The caption is escaped too, so it can be pasted into \caption{} as it stands.
    comment = "".join(f"% {latex_escape(line)}\n" for line in caption.strip().splitlines() if line)
    header = " & ".join(latex_escape(str(c)) for c in display_df.columns) + r" \\"
    body = [
        " & ".join(_latex_cell(str(v)) for v in row) + r" \\"
        for row in display_df.itertuples(index=False)
    ]
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline", header, r"\hline", *body, r"\hline", r"\end{tabular}"]
    return comment + "\n".join(lines) + "\n"


_LATEX_CHARS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "±": r"$\pm$", "—": "---", "–": "--", "−": "$-$", "τ": r"$\tau$", "λ": r"$\lambda$", "Δ": r"$\Delta$",
    "ρ": r"$\rho$", "<": r"$<$", ">": r"$>$",
}


def latex_escape(text: str) -> str:
    """Escape text for LaTeX in one pass, so replacements are never escaped a second time."""
    return "".join(_LATEX_CHARS.get(ch, ch) for ch in text)


def _latex_cell(text: str) -> str:
    match = re.fullmatch(r"\*\*(.+)\*\*", text)
    return rf"\textbf{{{latex_escape(match.group(1))}}}" if match else latex_escape(text)


def _numeric_column(column: pd.Series) -> bool:
    """Right-align a column whose every cell is a number, a dash, or a bold number."""
    return all(
        re.match(r"^(\*\*)?[+\-−]?\d", str(v)) or str(v) == MISSING for v in column
    ) and len(column) > 0


# --------------------------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------------------------


def mean_std(mean: float, std: float, decimals: int) -> str:
    """"41.0 ± 2.1"; the mean alone when the std is NaN (a single seed); a dash for no mean."""
    if isnan(mean):
        return MISSING
    if isnan(std):
        return f"{mean:.{decimals}f}"
    return f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def fixed(value: float, decimals: int) -> str:
    return MISSING if isnan(value) else f"{value:.{decimals}f}"


def signed(value: float, decimals: int, plus: bool = True) -> str:
    """A number with a typographic minus ("−0.4") and, if ``plus``, an explicit "+"."""
    text = f"{value:+.{decimals}f}" if plus else f"{value:.{decimals}f}"
    return text.replace("-", "−")


def comparison_cell(difference: float, ci_low: float, ci_high: float, p_value: float, decimals: int = 1,
                    holm: float | None = None, detectable: float | None = None) -> str:
    """"+1.2 [−0.4, 2.8], p=0.14, Holm p=0.41, MDE 3.1": a difference in points, its interval, p
    (two significant digits; "<0.001" below that), if given the Holm-adjusted p, and where the
    interval holds zero the smallest difference the comparison finds with 80 % power (MDE); a dash
    when there is no comparison, "(one run: noise unmeasured)" for a difference without an interval."""
    if isnan(difference):
        return MISSING
    if isnan(ci_low):
        return f"{signed(difference, decimals)} (one run: noise unmeasured)"

    def shown(p: float) -> str:
        return "<0.001" if p < 0.001 else f"={p:.2g}"

    cell = (f"{signed(difference, decimals)} [{signed(ci_low, decimals, plus=False)}, "
            f"{signed(ci_high, decimals, plus=False)}], p{shown(p_value)}")
    if holm is not None and not isnan(holm):
        cell += f", Holm p{shown(holm)}"
    if detectable is not None and not isnan(detectable) and ci_low <= 0 <= ci_high:
        cell += f", MDE {detectable:.{decimals}f}"
    return cell


def isnan(value: Any) -> bool:
    """True for None, pandas' NA and float NaN."""
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


def check_unique_steps(trajectory: pd.DataFrame) -> None:
    """A trajectory (one row per method, seed and step) with no step twice for one run."""
    doubled = trajectory.duplicated(["method", "seed", "step"])
    if doubled.any():
        bad = trajectory.loc[doubled].iloc[0]
        raise ValueError(f"trajectory: method {bad['method']!r} seed {bad['seed']} has step {bad['step']} twice")
