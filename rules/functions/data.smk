# The input functions and helpers that rules/data.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

from condensation.data.corpus import find_deb

# Offline text comes from Debian packages (CORPORA) that tools/fetch_debs.sh downloads.
DEB_DIR = "resources/debs"
HUB_DATASETS = [name for name, spec in DATASETS.items() if spec.source == "hub"]


def get_deb(wildcards):
    return str(find_deb(CORPORA[wildcards.corpus].package, DEB_DIR))
