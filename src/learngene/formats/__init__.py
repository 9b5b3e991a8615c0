"""Files in and out: atomic writes, weights, model files, run directories, checkpoint formats, export."""
