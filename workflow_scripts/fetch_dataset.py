"""Download one hub dataset into the cache, where the network is (rule fetch_dataset)."""

from condensation.stages import logged
from condensation.stages.data import fetch_dataset

with logged(snakemake.log[0], offline=False):
    fetch_dataset(name=snakemake.wildcards.dataset, spec=snakemake.params.spec, out_dir=snakemake.output[0])
