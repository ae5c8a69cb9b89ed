"""The plugin's trainer: MMF's own trainer with the plugin's training behaviour, registered
as ``uvlp`` (``training.trainer: uvlp``, which the plugin's configs set).

On MMF 1.0.0rc10 it is a subclass of ``BaseTrainer`` (:mod:`.rc10_trainer`), on MMF main of
``MMFTrainer`` (:mod:`.mmf_main_trainer`); what both share lives in :mod:`.behaviour`. A run
that chooses another trainer (MMF's ``base_trainer``, ``mmf``, ``lightning``) is MMF's own.

Which trainer a run chose, and the trainer's own switches: :mod:`mmf_uvlp.training.trainer_choice`.
"""
