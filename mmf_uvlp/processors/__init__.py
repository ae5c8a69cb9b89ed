"""MMF processors of the plugin: the μ-VLA masking processors (``uvla_*_masking``)."""
