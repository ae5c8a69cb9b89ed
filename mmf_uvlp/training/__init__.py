"""The plugin's own training behaviour, one concept a module, independent of the MMF
version: resumable checkpoints, the seeded resumable data order, seeding, the run-folder
lock, mixed precision, the non-finite loss check, command-line checks and one-line errors,
CPU distributed training, the multi-dataset mix, DataLoader workers and the training
progress the curriculum reads. The compatibility layer (``mmf_uvlp.compat``) registers the
patches; they act on plugin runs only (:mod:`mmf_uvlp.training.scope`)."""
