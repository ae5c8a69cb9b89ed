"""MMF processors of the plugin: the μ-VLA masking processors (``uvla_*_masking``)."""

# MMF first: importing it registers every component (mmf_uvlp.plugin) while none of this
# package's modules is half-initialised. Without it, a script whose first import is e.g.
# `from mmf_uvlp.models.uvla import UVLA` has the registration import vl_bert against the
# partial uvla module: "ImportError: cannot import name ... from partially initialized module".
import mmf  # noqa: E402,F401
