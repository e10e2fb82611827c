"""The exception tree of crcr.

    CrcrError                  base; carries a reference, what happened and a hint
    ├── ConfigError            bad settings or configuration files (exit status 2)
    ├── InputError             bad user input: arguments, files, specs (exit status 2)
    ├── ContractError          a file or payload does not match its contract
    └── ExternalError          an external system (GitHub, the LLM, a database) failed

Components define their own subclasses; the CLI prints ``error[reference]: message``
and ``hint: ...`` without a traceback unless ``--debug`` is given.
"""

from __future__ import annotations


class CrcrError(Exception):
    """Base of every error crcr raises on purpose."""

    reference = "crcr-error"
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, reference: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if reference is not None:
            self.reference = reference

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class ConfigError(CrcrError):
    reference = "bad-config"
    exit_code = 2


class InputError(CrcrError):
    reference = "bad-input"
    exit_code = 2


class ContractError(CrcrError):
    reference = "contract-violation"
    exit_code = 2


class ExternalError(CrcrError):
    reference = "external-failure"
    exit_code = 1


class MissingExtraError(CrcrError):
    """An optional dependency is not installed."""

    reference = "missing-extra"
    exit_code = 2

    def __init__(self, package: str, extra: str, feature: str) -> None:
        super().__init__(
            f"{feature} needs the optional package {package!r}, which is not installed",
            hint=f"pip install 'crcr[{extra}]'",
        )
