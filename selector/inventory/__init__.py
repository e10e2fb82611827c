"""Inventories: what upstream tests exist (static AST, embedded suite, test-times, OpInfo level)."""
