"""Selector errors, under crcr's tree.

    CrcrError
    ├── InputError
    │   └── SelectorInputError     a bad argument, inventory or plan file given to crcr select
    ├── ContractError
    │   └── PlanCheckError         ``crcr select check`` found problems (carries the findings)
    └── ExternalError
        └── AgentError             the LLM answered badly or could not be reached
"""

from __future__ import annotations

from crcr.errors import ContractError, ExternalError, InputError


class SelectorInputError(InputError):
    reference = "select-bad-input"


class PlanCheckError(ContractError):
    reference = "plan-check-failed"


class AgentError(ExternalError):
    reference = "select-agent-failed"
