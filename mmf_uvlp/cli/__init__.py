"""The console scripts (``[project.scripts]`` in pyproject.toml), each named after its module
(``uvlp-<module>``, ``_`` as ``-``); ``python -m mmf_uvlp.cli.<module>`` runs the same (an
installed study spawns its tools so). ``uvlp`` (:mod:`.overview`, also ``python -m mmf_uvlp``)
lists them with the run configs of ``projects/``.

    uvlp-attention-maps          mmf_uvlp.cli.attention_maps
    uvlp-convert-features        mmf_uvlp.cli.convert_features
    uvlp-convert-nlvr2           mmf_uvlp.cli.convert_nlvr2
    uvlp-build-corpus            mmf_uvlp.cli.build_corpus
    uvlp-extract-features        mmf_uvlp.cli.extract_features   (needs detectron2)
    uvlp-plot-alignment          mmf_uvlp.cli.plot_alignment
    uvlp-probe-grounding         mmf_uvlp.cli.probe_grounding
    uvlp-probe-mrc-shortcut      mmf_uvlp.cli.probe_mrc_shortcut
    uvlp-probe-visual-reliance   mmf_uvlp.cli.probe_visual_reliance
    uvlp-replicate               mmf_uvlp.cli.replicate
    uvlp-report                  mmf_uvlp.cli.report
    uvlp-vqa-breakdown           mmf_uvlp.cli.vqa_breakdown
    uvlp-make-toy-world          mmf_uvlp.cli.make_toy_world
"""
