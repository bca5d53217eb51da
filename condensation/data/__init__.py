"""Text in: built-in corpora, sampled sequences for measuring, packed blocks for training.

  corpus    the offline corpora's readers (Debian packages: Austen's novels, the Python docs;
            their registry is config.corpora.CORPORA)
  text      a dataset's rows (built-in corpus, your files, a hub dataset) and seeded sampling
  packing   token blocks for training, memory-mapped
"""
