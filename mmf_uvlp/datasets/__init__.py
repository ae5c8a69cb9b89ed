"""Pre-training and downstream datasets registered into MMF (MMF's builder/dataset layout)."""
