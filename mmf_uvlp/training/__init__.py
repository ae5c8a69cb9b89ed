"""How the plugin's training runs train where MMF lacks it: run-folder ownership,
precision and data loading, independent of the MMF version."""
