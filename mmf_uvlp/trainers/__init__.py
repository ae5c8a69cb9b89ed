"""The plugin's trainer: MMF's own trainer with the plugin's training behaviour, registered
as ``uvlp`` (``training.trainer: uvlp``, which the plugin's configs set).

On MMF 1.0.0rc10 it is a subclass of ``BaseTrainer`` (:mod:`.rc10_trainer`), on MMF main of
``MMFTrainer`` (:mod:`.mmf_main_trainer`). Both own the same components and only wire them
into their MMF version's methods; each component is one module and has ``state_dict()`` /
``load_state_dict()``: :class:`~.seeding.RandomState`, :class:`~.data_order.DataOrder`,
:class:`~.finite_loss.NonFiniteLossStop`, :class:`~.precision.MixedPrecision` (rc10; MMF main
has its own) and :class:`~.checkpoint.LrScheduleResume`; the checkpoint collects their
states (:class:`~.checkpoint.RunState`). A run that chooses another trainer (MMF's
``base_trainer``, ``mmf``, ``lightning``) is MMF's own.

The other modules: :mod:`.checkpoint` (atomic, plain-data files, the fit check, the run
state), :mod:`.side_stream` (the host-to-device prefetch of the training loaders),
:mod:`.progress` (what the curriculum reads), :mod:`.throughput`, :mod:`.console_log`; which
trainer a run chose, and the trainer's own switches: :mod:`.choice`.
"""
