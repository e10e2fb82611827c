"""The selector: upstream inventory, per-backend plans with a reason per test,
refinement from run logs, upgrades between PyTorch versions, and per-PR picks."""
