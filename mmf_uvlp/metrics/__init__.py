"""MMF metrics of the plugin (registered by name: ``refcoco_accuracy``)."""
