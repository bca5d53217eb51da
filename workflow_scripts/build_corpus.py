"""Unpack a Debian package and export its texts (rule build_corpus)."""

from condensation.stages import logged
from condensation.stages.data import build_corpus

with logged(snakemake.log[0]):
    build_corpus(source=snakemake.wildcards.corpus, deb_path=snakemake.input.deb, out_dir=snakemake.output[0])
