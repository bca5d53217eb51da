"""summary.md: the call's header, the targets' table (measured and met, or not) and each step's
numbers, for a reader of the lease's report rather than a program."""

from __future__ import annotations

from typing import Any


def number(value: Any) -> str:
    """Three significant digits, thousands grouped: ratios and rates read at a glance."""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def render(summary: dict[str, Any]) -> str:
    """summary.md from summary.json's content: the header, the targets, then each step."""
    call = summary["call"]
    cuda = summary["steps"].get("env", {}).get("cuda", {})
    device = f"{cuda['name']} ({cuda.get('memory_gib')} GiB)" if cuda.get("name") else "no GPU"
    versions = summary["steps"].get("env", {}).get("versions", {})
    lines = [
        "# GPU check" + (" (CPU rehearsal)" if call["mode"] != "gpu" else ""),
        "",
        (
            f"{call['date']} on {call['host']}: {device}; driver {call.get('driver')}; torch {versions.get('torch')} "
            f"(CUDA {cuda.get('torch_cuda')}); Python {call['python']}; commit {call.get('commit')}"
            f"{' with uncommitted changes' if call.get('uncommitted_changes') else ''}."
        ),
        "",
        "## Targets",
        "",
        "| target | bound | measured | met |",
        "|---|---|---|---|",
    ]
    unjudged = "not judged (CPU)" if call["mode"] != "gpu" else "not measured"
    for row in summary.get("targets", []):
        met = {True: "yes", False: "**no**", None: unjudged}[row["met"]]
        lines.append(f"| {row['target']} | {row['bound']} | {number(row['measured'])} | {met} |")
    lines += ["", "## Steps", ""]
    for name, step in summary["steps"].items():
        lines += render_step(name, step)
    return "\n".join(lines) + "\n"


def render_step(name: str, step: dict[str, Any]) -> list[str]:
    """A step's section: its status and box, its problems, then whatever of its results it has."""
    lines = [f"### {name}: {step.get('status')}", ""]
    if "box_s" in step:
        lines += [
            f"time box {step['box_s']:.0f} s, took {step.get('took_s', 0):.0f} s; log `{step.get('log', '')}`",
            "",
        ]
    lines += [f"* problem: {problem}" for problem in step.get("problems", [])]
    lines += [f"* warning: {warning}" for warning in step.get("warnings", [])]
    if name == "env":
        lines.append(f"* CUDA: {step.get('cuda')}")
        lines.append("* versions: " + ", ".join(f"{key} {value}" for key, value in step.get("versions", {}).items()))
        lines.append(f"* kit: {step.get('kit')}")
    if "passed" in step:
        lines.append(f"* {step['passed']} passed, {step['failed']} failed, {step['skipped']} skipped")
        lines += [f"* failed: `{test}`" for test in step.get("failed_tests", [])]
    for run in step.get("runs", []):
        lines.append(f"* `{run.get('command', run['name'])}`: {run['status']}, {run.get('wall_s', '')} s")
    for bench, values in step.get("numbers", {}).items():
        lines.append(f"* {bench}: " + "; ".join(f"{key} {number(value)}" for key, value in values.items()))
    if "jobs_done" in step:
        lines.append(f"* `{step.get('command')}`: {step['jobs_done']} jobs done in {step.get('wall_s')} s")
    lines += [
        f"* {key.replace('_', ' ')}: {step[key]}"
        for key in ("measurement_devices", "training_precisions", "all_on_gpu")
        if key in step
    ]
    for rule, times in step.get("job_seconds", {}).items():
        lines.append(f"* jobs of {rule}: {times['jobs']}, {times['total_s']} s in all, longest {times['longest_s']} s")
    if step.get("records"):
        left = step.get("records_left_out", [])
        lines.append(f"* records: `{step['records']}`" + (f" ({len(left)} files too large left there)" if left else ""))
    for key in ("table2", "findings"):
        if step.get(key):
            lines += ["", f"#### {key}", "", step[key].strip()]
    if step.get("error"):
        lines += ["", "```", step["error"][-3000:], "```"]
    return lines + [""]
