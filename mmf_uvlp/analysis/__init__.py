"""Looking inside a checkpoint: what its attention grounds and how its spaces align.

- :mod:`~mmf_uvlp.analysis.examples`: captions of Flickr30K Entities as probe examples;
- :mod:`~mmf_uvlp.analysis.regions`: the images' detected regions (MMF feature files);
- :mod:`~mmf_uvlp.analysis.systems`: ``uvla`` (BERT init or pre-trained) and MMF
  ``visual_bert`` checkpoints, returning attention maps and hidden states;
- :mod:`~mmf_uvlp.analysis.grounding`: the attention-grounding probe and its baselines
  (:mod:`~mmf_uvlp.analysis.probe_report` writes its tables and figures);
- :mod:`~mmf_uvlp.analysis.attention_maps`: each word's attention over the regions;
- :mod:`~mmf_uvlp.analysis.alignment`: word / tag / region representations, t-SNE, MRR;
- :mod:`~mmf_uvlp.analysis.figures`: the plots; :mod:`~mmf_uvlp.analysis.cli`: the tools'
  shared arguments (``uvlp-probe-grounding``, ``uvlp-attention-maps``,
  ``uvlp-plot-alignment``).
"""
