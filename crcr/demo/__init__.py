"""What ``crcr demo`` needs besides the components: a local upstream history, a local
OIDC issuer and real webhook payloads pointed at that history. Nothing here imports a
component (relay, selector, runners, triage); ``crcr.cli.demo`` composes them through
the ``crcr`` CLI, as a real deployment does.
"""
