"""What a training run needs at MMF's command line beyond the trainer: one-line errors, the
command line's literal values, CPU distributed training, the run folder and its lock. The
trainer itself, by concern, is :mod:`mmf_uvlp.trainers`."""
