# The targets of the default `all` job, every figure, table and metric the config implies.


def observation_targets():
    families = config["families"]
    targets = [
        f"{stem}.{ext}"
        for family, spec in families.items()
        for stem in expand(path.trend_table, family=family, dataset=spec["datasets"])
        for ext in ("csv", "md")
    ]
    targets += [
        figure
        for family, spec in families.items()
        for figure in expand(path.family_figure, family=family, dataset=spec["datasets"])
    ]
    targets += expand(path.paired_figure, pair=config["pairs"])
    targets += expand(path.similarity_table, comparison=config["similarity"])
    targets += expand(path.dataset_figure, family=config["dataset_robustness"])
    targets += expand(path.series_figure, series=config["series"])
    targets += expand(path.series_band_figure, band=SERIES_BANDS)
    if families:
        targets += expand(path.metrics, name=["trend.json", "layer_means.csv"])
    return targets


def study_targets():
    targets = []
    for study in studies(config):
        targets += expand(path.study_figure, study=study, model=config[study]["models"], kind=STUDY_FIGURE_KINDS)
        targets += expand(path.metrics, name=[f"{study}.json", f"{study}_training.csv", f"{study}_checkpoints.csv"])
        targets += expand(
            f"{path.pooled_effects}.{{ext}}", study=study, bases=POOLED_BASES.get(study, {}), ext=["csv", "md"]
        )
    return targets


def score_targets():
    """Tables 2 and 3 of mid-training (Table 3 when the config has an ablation grid) with the score
    metrics, Table 4 of pre-training from scratch, and the scores over training if asked for."""
    if not config["evaluation"]["tasks"]:
        return []
    targets = expand(f"{path.table}.{{ext}}", table=score_tables(config), ext=["csv", "md", "tex", "html"])
    if config["midtrain"]["models"]:
        targets += expand(path.metrics, name=["scores.json", "scores.csv"])
    if config["evaluation"]["checkpoints"] == "all":
        targets += expand(f"{path.table}.csv", table=[f"{study}_scores_by_step" for study in studies(config)])
    return targets


def all_targets():
    return observation_targets() + study_targets() + score_targets() + [path.findings]
