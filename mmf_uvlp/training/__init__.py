"""How MMF's trainer trains: precision and data loading, independent of the MMF version."""
