"""Test doubles that speak the real protocol over real HTTP (GitHub, ...)."""
