"""Run the harness for one (solution, device) job in a chosen runtime (host for now)."""
