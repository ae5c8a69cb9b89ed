"""mmf_uvlp: unsupervised vision-and-language pre-training (μ-VLA) as an MMF plugin.

Importing this package is cheap. It installs the compatibility hook (see
``mmf_uvlp.compat``), which registers the plugin's models, datasets, processors,
losses and metrics into MMF's registry on the first ``import mmf``. When MMF was
imported before this package (``env.user_dir=mmf_uvlp`` in an environment
without our ``.pth`` file), the components are registered right away.
"""

import sys

from mmf_uvlp.compat import install as _install_compat

__version__ = "0.1.0"

_install_compat()

if "mmf.common.registry" in sys.modules:
    from mmf_uvlp.plugin import register_components

    register_components()
