"""Files in and out: atomic writes, weights, model files, checkpoint formats, export."""
