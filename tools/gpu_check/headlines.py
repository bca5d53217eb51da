"""The figures of each benchmark's JSON that the targets read, and those that say where the time
goes (the profile's largest ops, the lenses' finalize, the swept tile bodies): the summary keeps
these, the JSON itself travels in logs.tar.gz."""

from __future__ import annotations

from typing import Any


def headline(name: str, report: dict) -> dict[str, Any]:
    """The figures of a benchmark's JSON that the issue's targets read (missing ones are left out),
    and the three largest ops of its profile, if it made one."""
    numbers: dict[str, Any] = {"device": report.get("device"), "dtype": report.get("dtype")}
    if name.startswith("dispersion"):
        numbers |= dispersion_numbers(report)
    elif name == "training":
        variants = report.get("variants", {})
        if "ours" in variants and "plain" in variants:
            numbers["ours / plain tokens/s"] = variants["ours"]["tokens_per_s"] / variants["plain"]["tokens_per_s"]
        if "ours+compile" in variants and "plain" in variants:
            numbers["ours+compile / plain tokens/s"] = (
                variants["ours+compile"]["tokens_per_s"] / variants["plain"]["tokens_per_s"]
            )
        for variant, row in variants.items():
            numbers[f"{variant} tokens/s"] = row["tokens_per_s"]
            if row.get("mfu") is not None:
                numbers[f"{variant} MFU"] = row["mfu"]
    elif name == "extraction":
        ratios = report.get("ratios", {})
        if "ours_over_reference" in ratios:
            numbers["ours / reference (speed-up)"] = ratios["ours_over_reference"]
        if "bare_over_ours" in ratios:
            numbers["ours time / bare time"] = ratios["bare_over_ours"]
        if "per_batch_over_bare" in ratios:
            numbers["per batch / bare"] = ratios["per_batch_over_bare"]
        numbers |= extraction_breakdown(report)
    if report.get("profile"):
        numbers["top ops"] = ", ".join(f"{row['op']} {row['share']:.0%}" for row in report["profile"][:3])
    profiles = report.get("train", {}).get("profiles", {})  # dispersion_loss.py's, one per step variant
    timelines = {"": report.get("profile_timeline")} | {
        f"{variant}: ": profiled.get("timeline") for variant, profiled in profiles.items()}
    for prefix, timeline in timelines.items():
        numbers |= timeline_numbers(timeline, prefix)
    return numbers


def timeline_numbers(timeline: dict | None, prefix: str = "") -> dict[str, Any]:
    """A profile's timeline (``benchmarks/_common.device_timeline``) as the issue's item 6 asks: the
    GPU's busy share of the profiled wall time, and kernel launches and host synchronisations per
    step (or batch). Nothing for a CPU run, which has none of them."""
    if not timeline or timeline.get("busy_share") is None:
        return {}
    unit, per = timeline["unit"], timeline["per_unit"]
    return {f"{prefix}GPU busy share": timeline["busy_share"], f"{prefix}kernel launches a {unit}": per["launches"],
            f"{prefix}host syncs a {unit}": per["host_syncs"]}


def extraction_breakdown(report: dict) -> dict[str, Any]:
    """Where extraction's time goes: the lenses against the cosines alone, the fixed cost of
    ``finalize`` once per call, and the lenses' part of it (their eigendecompositions, on the GPU
    and on the host)."""
    numbers: dict[str, Any] = {}
    ratios, finalize = report.get("ratios", {}), report.get("lens_finalize", {})
    if "lenses_cost" in ratios:
        numbers["ours / cosines (the lenses)"] = ratios["lenses_cost"]
    if "fixed_s" in finalize:
        numbers["finalize once per call s"] = finalize["fixed_s"]
    placements = finalize.get("placements", {})
    if {"device", "host"} <= placements.keys():
        numbers["lens finalize, spectra on the model's device s"] = placements["device"]["time_s"]
        numbers["lens finalize, spectra on the host s"] = placements["host"]["time_s"]
        numbers["lens finalize / ours"] = ratios.get("lens_finalize_share")
    return numbers


def dispersion_numbers(report: dict) -> dict[str, Any]:
    """Each dispersion variant's step time and extra memory against the CE step's (the targets'
    ratios), the tile bodies against each other, and each swept candidate with its gradient's error."""
    numbers: dict[str, Any] = {}
    train = report.get("train", {})
    variants = train.get("variants", {})
    base = variants.get("ce", {})
    if "step" in train:
        numbers["CE step"] = train["step"]  # compiled: the denominator the issue asks for
    for variant in ("ce+tiled", "ce+compiled", "ce+compiled+bf16", "ce+compiled/layer"):
        row = variants.get(variant)
        if row and base:
            numbers[f"{variant} step / ce step"] = row["time_s"] / base["time_s"]
            numbers[f"{variant} extra memory / ce memory"] = (row["memory_bytes"] - base["memory_bytes"]) / base[
                "memory_bytes"
            ]
    for key in ("tiled_over_compiled_overhead", "tiled_over_compiled_loss_alone"):
        if train.get(key) is not None:
            numbers[f"step: {key}"] = train[key]
    loss = report.get("loss", {}).get("variants", {})
    for slow, fast in (("tiled", "compiled"), ("compiled/layer", "compiled"), ("compiled", "compiled+bf16"),
                       ("compiled", "triton"), ("compiled+bf16", "triton+bf16")):
        if slow in loss and fast in loss:
            numbers[f"loss alone: {slow} / {fast}"] = loss[slow]["time_s"] / loss[fast]["time_s"]
    agreement = report.get("loss", {}).get("agreement", {})
    for name in (name for name in loss if "@" in name and "compiled" in loss):  # --sweep's candidates
        numbers[f"loss alone: compiled / {name}"] = loss["compiled"]["time_s"] / loss[name]["time_s"]
    for name in (name for name in agreement if "@" in name or name.endswith("+bf16")):
        numbers[f"{name} gradient vs dense (max rel)"] = agreement[name]["grad_max_rel_diff"]
    if "placement" in train:
        numbers["placement"] = train["placement"]
    return numbers
