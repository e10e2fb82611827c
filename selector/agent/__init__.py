"""Agents decide what the rules leave undecided: ``offline`` (default) or ``claude``."""
