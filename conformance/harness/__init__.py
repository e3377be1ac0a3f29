"""The framework's harness: engine files, the probe, process supervision, plan and live runners."""
