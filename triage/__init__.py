"""Triage: separate flaky and infra failures from real breaks, confirm the suspect
upstream commit, and draft an autorevert report for a person to act on."""
