"""What the machine gives a run: its environment variables (read with their ranges), CPU threads and memory."""
