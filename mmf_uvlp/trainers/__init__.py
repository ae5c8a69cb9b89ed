"""The plugin's trainer: MMF's own trainer with the plugin's training behaviour, registered
as ``uvlp`` (``training.trainer: uvlp``, which the plugin's configs set).

On MMF 1.0.0rc10 it is a subclass of ``BaseTrainer`` (:mod:`.rc10_trainer`), on MMF main of
``MMFTrainer`` (:mod:`.mmf_main_trainer`); what both share lives in :mod:`.behaviour`. A run
that chooses another trainer (MMF's ``base_trainer``, ``mmf``, ``lightning``) is MMF's own.

One module per concern: :mod:`.checkpoint` (atomic, plain-data files, the fit check, the run
state), :mod:`.precision`, :mod:`.data_order`, :mod:`.seeding`, :mod:`.finite_loss`,
:mod:`.side_stream` (the host-to-device prefetch), :mod:`.progress` (what the curriculum
reads), :mod:`.throughput`; which trainer a run chose, and the trainer's own switches:
:mod:`.choice`.
"""
