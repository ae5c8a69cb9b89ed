"""MMF models of the plugin (registered by name: ``uvla``)."""
