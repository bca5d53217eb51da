# The input functions and helpers that rules/models.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

import os

from snakemake.exceptions import WorkflowError

from condensation.config.plan import built_arch
from condensation.config.plan import model_seed as plan_model_seed

HUB_MODELS = [name for name, spec in MODELS.items() if spec.source == "hub"]


def hub_checked_in_a_dry_run(wildcards):
    """No input. In a dry run the first fetch_model planned asks the Hub about every hub model not
    fetched yet, and stops the plan with what each fetch would stop with: a gated model, an
    unknown id or revision (models.hub_access_problems). A real run leaves that to the fetches."""
    if workflow.dryrun and not HUB_CHECKED:
        HUB_CHECKED.append(True)
        check_hub_models(
            {
                name: (MODELS[name].id, MODELS[name].revision)
                for name in HUB_MODELS
                if not os.path.exists(path_with(path.handle, model=name))
            }
        )
    return []


HUB_CHECKED = []


def check_hub_models(hub_models):
    if not hub_models:
        return
    # deferred: huggingface_hub, in the dry runs that have hub models to fetch only
    from condensation.models import hub_access_problems

    problems = hub_access_problems(hub_models)
    if problems is None:
        print(
            f"Dry run: the Hugging Face Hub did not answer (or HF_HUB_OFFLINE is set): {len(hub_models)} hub "
            "models to fetch were not checked for a gate or a missing revision.",
            file=sys.stderr,
        )
    elif problems:
        raise WorkflowError(
            f"{len(problems)} of the {len(hub_models)} hub models to fetch would fail:\n" + "\n".join(problems)
        )


def model_seed(wildcards):
    """The seed a model is pre-trained or initialised with, seed_offset included (plan.model_seed)."""
    return plan_model_seed(config, wildcards.model)


def study_input_models():
    """The models a study run reads: each study's starting models and every distillation teacher."""
    # a distillation method names one teacher, or one per seed (a list)
    named = [method.get("teacher") for methods in STUDY_METHODS.values() for method in methods.values()]
    teachers = {teacher for entry in named for teacher in (entry if isinstance(entry, list) else [entry])}
    return ({model for study in studies(config) for model in config[study]["models"]} | teachers) - {None}


STUDY_INPUT_MODELS = study_input_models()


def pretrain_priority(wildcards):
    """A pre-training run that study runs start from or distil from before the others."""
    return PRIORITY.run_input_pretraining if wildcards.model in STUDY_INPUT_MODELS else PRIORITY.training


def prepare_model_priority(wildcards):
    """The handle of a study's starting model or teacher gates its runs; other models wait."""
    return PRIORITY.training_input if wildcards.model in STUDY_INPUT_MODELS else 0


def pretrain_tokenizer_inputs(wildcards):
    """A model's tokenizer (its handle), or the text a BPE is trained on."""
    existing = config["pretrain"]["tokenizer"]
    return (
        {"handle": path_with(path.handle, model=existing)}
        if existing
        else dataset_inputs(config["pretrain"]["dataset"])
    )


def get_model_inputs(wildcards):
    """What a model's handle is made from: a pre-training run or a study's run, or the tokenizer
    of an init model."""
    spec = MODELS[wildcards.model]
    if spec.source == "pretrain":
        return {"pretrained": path_with(path.pretrain_run.final, model=wildcards.model)}
    if spec.source == "run":
        return {
            "pretrained": path_with(
                path.study_run.final, study=spec.study, model=spec.of, method=spec.method, seed=spec.seed
            )
        }
    if spec.source == "init" and MODELS[spec.of].source == "pretrain":
        return {"tokenizer": path.tokenizer}
    if spec.source == "init":  # the architecture and tokenizer of a hub model
        return {"base": path_with(path.handle, model=spec.of)}
    return {}


def get_model_arch(wildcards):
    """Architecture of a pretrain model, or of the model an init model is the start of, with
    `ln_scaling: True` where the model is LN-scaled (plan.built_arch: an unscaled model's params
    are as they were, a changed setting reruns the model)."""
    spec = MODELS[wildcards.model]
    arch = MODELS[spec.of].arch if spec.source == "init" else spec.arch
    return built_arch(config, wildcards.model, arch)


def _others(names):
    """Any model name but these (a rule that makes every other model's handle)."""
    return _alternatives(set(config["models"]) - set(names))
