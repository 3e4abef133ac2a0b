"""Server settings, read from KUBECUA_* environment variables by pydantic-settings (and a few CLI
flags in __main__); the token by the sandbox client's one reader."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kubecua_sandbox_client import TokenError, read_token


class SettingsError(ValueError):
    """A setting is missing or inconsistent; the message says which and how to fix it."""


def _colon_list(value: Any) -> Any:
    return [p for p in value.split(":") if p] if isinstance(value, str) else value


class Settings(BaseSettings):
    """Everything the server needs; defaults follow OSWorld's server. A field reads KUBECUA_<NAME>
    or the variable its alias names; an empty variable counts as unset."""

    model_config = SettingsConfigDict(
        env_prefix="KUBECUA_", env_ignore_empty=True, validate_by_name=True
    )

    host: str = "127.0.0.1"
    port: int = 5000
    token: str | None = None
    # Upstream desktop-env sends no Authorization header. With this on, clients on 127.0.0.1 (the
    # episode server in the same pod or host) need no token; every other client still does.
    trust_loopback: bool = Field(False, validation_alias="KUBECUA_DESKTOP_TRUST_LOOPBACK")
    file_roots: Annotated[list[Path], NoDecode, BeforeValidator(_colon_list)] = Field(
        default_factory=lambda: [Path.home(), Path("/tmp")],
        validation_alias="KUBECUA_DESKTOP_FILE_ROOTS",
    )
    # "xgetimage" skips MIT-SHM (kubecua_desktop.desktop.capture); "default" tries it first.
    capture_backend: str = Field("default", validation_alias="KUBECUA_DESKTOP_CAPTURE")
    # /accessibility and /terminal run a helper under Debian's python3, which has pyatspi (apt).
    atspi_python: str = "/usr/bin/python3"
    # /run_python runs code with this interpreter; the session puts a python with pyautogui first.
    python: str = Field("python3", validation_alias="KUBECUA_DESKTOP_PYTHON")
    # /execute's pyautogui actions run in a pre-forked warm python (kubecua_desktop.warm); "0"
    # turns that off and every action starts a fresh python again.
    warm_python: bool = Field(True, validation_alias="KUBECUA_DESKTOP_WARM_PYTHON")
    recording_dir: Path = Path("/tmp")
    # Not settings: this server's limits.
    command_timeout_s: ClassVar[float] = 120.0
    python_timeout_s: ClassVar[float] = 30.0
    open_file_timeout_s: ClassVar[float] = 60.0
    png_compress_level: ClassVar[int] = 1  # 0 stores; 1..9: ISA-L level min(level, 2) (png.py)

    @classmethod
    def from_env(cls, **given: Any) -> Settings:
        """From the environment, `given` (host, port) taking precedence; SettingsError names
        the variable that is wrong."""
        try:
            return cls(token=read_token(), **given)
        except TokenError as exc:
            raise SettingsError(str(exc)) from None
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = str(err["loc"][0])  # a field's name, or the variable it has as alias
            name = loc if loc.startswith("KUBECUA_") else f"KUBECUA_{loc.upper()}"
            raise SettingsError(f"{name}={err['input']!r}: {err['msg']}") from None

    def validate_token(self) -> None:
        if not self.token and not self.trust_loopback:
            raise SettingsError(
                "no bearer token: set KUBECUA_SANDBOX_TOKEN or KUBECUA_SANDBOX_TOKEN_FILE "
                "(or KUBECUA_DESKTOP_TRUST_LOOPBACK=1 to serve loopback clients only)"
            )
