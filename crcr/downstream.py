"""The downstream half of the loop (pick -> run -> report), composed from components.

A ``local`` allowlist target runs ``crcr downstream`` with the dispatch payload
(CRCR's ``client_payload``) on standard input.
"""
