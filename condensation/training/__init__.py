"""Training against condensation: the loop and what plugs into it.

  loop           the one training loop (accelerate): pre-training from scratch and the studies
  batches        the order blocks are read in, next-token CE, the validation loss
  precision      which precision a run trains in
  checkpointing  checkpoints, final/, the resumable state and its identity check
  losses         the dispersion loss and its three alternatives, and the representation losses
                 JREG and SimReg (plain PyTorch, and the reference formulas the tests check
                 against); kernels: the dispersion loss tile by tile
  baselines      noisy embedding and active forgetting, as hooks into the loop
"""
