"""The protected result gate: pipeline, verdict, protected paths, delivery."""
