"""Features of the plugin's training runs that MMF lacks (hooked at MMF's run start)."""
