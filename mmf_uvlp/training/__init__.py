"""The plugin's training behaviour as functions, one concept a module, independent of the
MMF version: what resumable checkpoints save and restore, the seeded resumable data order,
mixed precision, the multi-dataset mix, DataLoader workers, the run-folder lock,
command-line checks and one-line errors, CPU distributed training and the training progress
the curriculum reads. The ``uvlp`` trainer (``mmf_uvlp.trainers``) calls them; nothing here
changes MMF's classes."""
