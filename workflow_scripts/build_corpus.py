"""Unpack a Debian package and export its texts (rule build_corpus)."""

from condensation.stages import build_corpus, logged

with logged(snakemake.log[0]):
    build_corpus(snakemake.wildcards.corpus, snakemake.input.deb, snakemake.output[0])
